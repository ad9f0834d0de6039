"""Routes of the control loop's API.

The operator actions sit under ``regions/<name>/`` and ``endpoints/<name>/`` next to the
configuration viewsets' detail routes (``regions/<name>/``, trailing slash, nothing after),
so they cannot collide; each takes an optional trailing slash.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path

from regions.api import loop_views as v

NAME = r"(?P<name>[A-Za-z0-9_.\-]+)"
REGION_ACTIONS = ("drain", "undrain", "weight", "pause-failover", "resume-failover")
ENDPOINT_ACTIONS = ("drain", "undrain")


def _action(kind: str, action: str) -> URLPattern:
    return re_path(
        rf"^{kind}s/{NAME}/{action}/?$",
        v.ActionView.as_view(kind=kind, verb=action),
        name=f"{kind}-{action}",
    )


urlpatterns = [
    path("heartbeats/", v.HeartbeatView.as_view(), name="heartbeats"),
    re_path(rf"^heartbeats/{NAME}/drill/?$", v.DrillPollView.as_view(), name="heartbeat-drill"),
    path("routing/table", v.RoutingTableView.as_view(), name="routing-table"),
    path("routing/history", v.RoutingHistoryView.as_view(), name="routing-history"),
    path("routing/history/<str:version>", v.RoutingVersionView.as_view(), name="routing-version"),
    path("route", v.RouteView.as_view(), name="route"),
    path("route/completions", v.CompletionsView.as_view(), name="route-completions"),
    *[_action("region", a) for a in REGION_ACTIONS],
    *[_action("endpoint", a) for a in ENDPOINT_ACTIONS],
]
