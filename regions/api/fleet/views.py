"""``POST fleet/apply`` (plan, then apply) and ``GET fleet/export`` (the stored fleet)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, renderers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from regions.api.fleet import service
from regions.api.fleet.schema import APPLY_SCHEMA, EXPORT_FORMATS, EXPORT_SCHEMA
from regions.api.parsers import JSONParser
from regions.fleet.services import fleet_snapshot
from regions.models import Role
from trafficmgr.fleetfile import fleet_to_dict


class YamlRenderer(renderers.BaseRenderer):
    """Render a fleet document exactly as ``export_fleet`` writes it."""

    media_type = "text/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: dict[str, Any] | None = None,  # type: ignore[override]
    ) -> bytes:
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
        return text.encode("utf-8")


class FleetApplyView(APIView):
    """Plan a fleet file against the stored fleet; apply it unless ``dry_run``."""

    write_role = Role.OPERATOR  # operators may dry-run; applying is checked for admin below
    parser_classes = [
        service.YamlParser,
        service.XYamlParser,
        service.TextYamlParser,
        service.PlainTextParser,
        JSONParser,
    ]

    @extend_schema(**APPLY_SCHEMA)
    def post(self, request: Request) -> Response:
        ask = service.parse_apply(request)
        service.check_may_apply(request.user, ask)
        plan = service.plan_and_apply(ask)
        return Response(service.plan_body(plan, ask))


class ExportNegotiation(DefaultContentNegotiation):
    """``?format=`` names one of ``EXPORT_FORMATS``; anything else is a 400 naming it (DRF's
    default answers a 404, which says the resource is missing)."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> Any:
        name = self.settings.URL_FORMAT_OVERRIDE
        if name and name in request.query_params and not request.query_params[name]:
            self.filter_renderers(renderers, "")  # present but empty: refused like any other
        return super().select_renderer(request, renderers, format_suffix)

    def filter_renderers(
        self, renderers: Iterable[BaseRenderer], format: str
    ) -> list[BaseRenderer]:
        found = [r for r in renderers if r.format == format]
        if not found:
            raise exceptions.ValidationError(
                {"format": [f"{format[:40]!r} is not one of {', '.join(EXPORT_FORMATS)}"]}
            )
        return found


class FleetExportView(APIView):
    """The stored fleet as a fleet file (YAML), or as JSON with ``?format=json``.

    Errors are JSON in the one error format, whichever format was asked for.
    """

    renderer_classes = [YamlRenderer, renderers.JSONRenderer]
    content_negotiation_class = ExportNegotiation

    @extend_schema(**EXPORT_SCHEMA)
    def get(self, request: Request) -> Response:
        return Response(fleet_to_dict(fleet_snapshot()))

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        self.request.accepted_renderer = renderers.JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return response
