"""Routes of the control loop's API.

The operator actions sit under ``regions/<name>/`` and ``endpoints/<name>/`` next to the
configuration viewsets' detail routes (``regions/<name>/``, trailing slash, nothing after),
so they cannot collide. Every route here takes an optional trailing slash, like the rest of
the API: ``POST /api/v1/route/`` must not 404 where ``/api/v1/route`` answers. The schema and
``reverse`` name the form without it, the one the ASGI front (``regions.api.fastfront``)
answers itself; the slashed form goes through Django to the same view.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from regions.api.loop import views as v

NAME = r"(?P<name>[A-Za-z0-9_.\-]+)"
REGION_ACTIONS = ("drain", "undrain", "weight", "pause-failover", "resume-failover")
ENDPOINT_ACTIONS = ("drain", "undrain")


def _action(kind: str, action: str) -> URLPattern:
    view = v.WeightView if action == "weight" else v.ActionView  # the one that takes a body
    return re_path(
        rf"^{kind}s/{NAME}/{action}/?$",
        view.as_view(kind=kind, verb=action),
        name=f"{kind}-{action}",
    )


def _slashed(*routes: tuple[str, type[APIView]]) -> list[URLPattern]:
    """The same views at ``route/``, left out of the schema: one documented path each."""
    out = []
    for route, view in routes:
        slashed: type[APIView] = type(f"{view.__name__}Slashed", (view,), {})
        out.append(path(f"{route}/", extend_schema(exclude=True)(slashed).as_view()))
    return out


urlpatterns = [
    path("heartbeats/", v.HeartbeatView.as_view(), name="heartbeats"),
    re_path(rf"^heartbeats/{NAME}/drill/?$", v.DrillPollView.as_view(), name="heartbeat-drill"),
    path("routing/table", v.RoutingTableView.as_view(), name="routing-table"),
    path("routing/history", v.RoutingHistoryView.as_view(), name="routing-history"),
    path("routing/history/<str:version>", v.RoutingVersionView.as_view(), name="routing-version"),
    path("route", v.RouteView.as_view(), name="route"),
    path("route/completions", v.CompletionsView.as_view(), name="route-completions"),
    *_slashed(
        ("routing/table", v.RoutingTableView),
        ("routing/history", v.RoutingHistoryView),
        ("routing/history/<str:version>", v.RoutingVersionView),
        ("route", v.RouteView),
        ("route/completions", v.CompletionsView),
    ),
    *[_action("region", a) for a in REGION_ACTIONS],
    *[_action("endpoint", a) for a in ENDPOINT_ACTIONS],
]
