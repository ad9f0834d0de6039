"""``POST fleet/apply`` (plan, then apply) and ``GET fleet/export`` (the stored fleet)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, parsers, renderers, serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from regions.access.permissions import has_role
from regions.api.parsers import JSONParser
from regions.api.schema import ERROR
from regions.fleet.plan import TYPES, apply_plan, plan_fleet
from regions.fleet.services import fleet_snapshot
from regions.models import Role
from trafficmgr.fleetfile import MAX_BYTES, fleet_to_dict, load_fleet_text

TRUE = {"1", "true", "yes", "on"}
FALSE = {"", "0", "false", "no", "off"}


class FleetTextParser(parsers.BaseParser):
    """Hand the body over as bytes; the fleet loader decodes and validates it."""

    media_type = "application/yaml"

    def parse(  # type: ignore[override]
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,  # type: ignore[override]
    ) -> bytes:
        if stream is None:
            return b""
        data: bytes = stream.read(MAX_BYTES + 1)
        return data


class YamlParser(FleetTextParser):
    media_type = "application/yaml"


class XYamlParser(FleetTextParser):
    media_type = "application/x-yaml"


class TextYamlParser(FleetTextParser):
    media_type = "text/yaml"


class PlainTextParser(FleetTextParser):
    media_type = "text/plain"


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


def _flag(request: Request, name: str) -> bool:
    raw = str(request.query_params.get(name, "")).strip().lower()
    if raw in TRUE:
        return True
    if raw in FALSE:
        return False
    raise exceptions.ValidationError({name: [f"{raw!r} is not a boolean (use 1 or 0)"]})


def _fleet_text(request: Request) -> str | bytes:
    data = request.data
    if isinstance(data, bytes | str):
        return data
    if isinstance(data, dict) and isinstance(data.get("fleet"), str):
        return str(data["fleet"])
    raise exceptions.ValidationError(
        {"fleet": ['send the fleet file as YAML text, or JSON {"fleet": "<yaml>"}']}
    )


class ChangeSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=["create", "update", "delete"])
    type = serializers.ChoiceField(choices=list(TYPES))
    name = serializers.CharField()
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(min_length=2, max_length=2),
        help_text="per changed field, [old, new] (null when absent)",
    )


class SafetySerializer(serializers.Serializer):
    endpoints_before = serializers.IntegerField()
    endpoints_deleted = serializers.IntegerField()
    capacity_before = serializers.FloatField(help_text="serving decode tokens/s")
    capacity_after = serializers.FloatField()
    unsafe = serializers.ListField(
        child=serializers.CharField(), help_text="why the safety valve refuses the plan"
    )


class FleetPlanSerializer(serializers.Serializer):
    changes = ChangeSerializer(many=True)
    summary = serializers.CharField(help_text="e.g. '2 to create, 1 to update, 0 to delete'")
    counts = serializers.DictField(child=serializers.IntegerField())
    safety = SafetySerializer()
    applied = serializers.BooleanField()


class FleetApply(serializers.Serializer):
    fleet = serializers.CharField(help_text="the fleet file, as YAML text")


class FleetApplyView(APIView):
    """Plan a fleet file against the stored fleet; apply it unless ``dry_run``."""

    write_role = Role.OPERATOR  # operators may dry-run; applying is checked for admin below
    parser_classes = [YamlParser, XYamlParser, TextYamlParser, PlainTextParser, JSONParser]

    @extend_schema(
        operation_id="fleet_apply",
        summary="Plan and apply a fleet file",
        description="Body: the fleet file as YAML (`application/yaml` or `text/plain`), or "
        'JSON `{"fleet": "<yaml>"}`. Returns the plan, per object create / update (fields '
        "old → new) / delete. `dry_run=1` only plans (operator or admin); applying needs "
        "admin. A plan deleting more than 30 % of endpoints or removing more than 50 % of "
        "serving capacity is refused with 409 unless `force=1` (admin).",
        request={
            "application/yaml": OpenApiTypes.STR,
            "text/plain": OpenApiTypes.STR,
            "application/json": FleetApply,
        },
        parameters=[
            OpenApiParameter("dry_run", OpenApiTypes.BOOL, description="only plan"),
            OpenApiParameter(
                "force",
                OpenApiTypes.BOOL,
                description="apply even if the safety valve refuses (admin)",
            ),
        ],
        responses={
            200: FleetPlanSerializer,
            400: OpenApiResponse(
                ERROR,
                description="Invalid fleet file; `fields` is keyed by "
                "path, e.g. `regions[0].endpoints[1].gpu`.",
            ),
            403: OpenApiResponse(ERROR, description="Applying or forcing needs admin."),
            409: OpenApiResponse(
                ERROR,
                description="Refused by the safety valve "
                "(`unsafe_plan`, with `safety` figures) or the stored fleet "
                "changed meanwhile (`stale_plan`).",
            ),
        },
        tags=["fleet"],
    )
    def post(self, request: Request) -> Response:
        dry_run, force = _flag(request, "dry_run"), _flag(request, "force")
        if not dry_run and not has_role(request.user, Role.ADMIN):
            raise exceptions.PermissionDenied(
                "applying a fleet needs the admin role; operators may use dry_run=1"
            )
        if force and not has_role(request.user, Role.ADMIN):
            raise exceptions.PermissionDenied("force needs the admin role")
        plan = plan_fleet(load_fleet_text(_fleet_text(request)))
        if not dry_run:
            plan = apply_plan(plan, force=force)
        return Response(plan.as_dict() | {"applied": not dry_run and not plan.empty})


_NUMBER = {"type": "number"}
_NAMED = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
# The fleet file (docs/architecture.md §5) as ``export_fleet`` writes it: the keys every
# export has; others (optional sections, added settings) may follow.
FLEET_DOCUMENT: dict[str, Any] = {
    "type": "object",
    "description": "A fleet file: what `manage.py export_fleet` writes and `apply_fleet` reads.",
    "required": ["zone", "ttl", "gpu_profiles", "regions", "residency", "failover"],
    "properties": {
        "zone": {"type": "string"},
        "ttl": {"type": "integer", "minimum": 0},
        "gpu_profiles": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["prefill_tokens_per_s", "decode_tokens_per_s", "max_concurrency"],
                "properties": {
                    "prefill_tokens_per_s": _NUMBER,
                    "decode_tokens_per_s": _NUMBER,
                    "max_concurrency": {"type": "integer"},
                },
            },
        },
        "regions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "country", "location", "addresses", "endpoints"],
                "properties": {
                    "name": {"type": "string"},
                    "country": {"type": "string"},
                    "location": {
                        "type": "object",
                        "required": ["lat", "lon"],
                        "properties": {"lat": _NUMBER, "lon": _NUMBER},
                    },
                    "addresses": {"type": "array", "items": {"type": "string"}},
                    "priority": {"type": "integer"},
                    "weight": _NUMBER,
                    "state": {"type": "string"},
                    "endpoints": {"type": "array", "items": _NAMED},
                },
            },
        },
        "residency": {"type": "array", "items": _NAMED},
        "failover": {"type": "object"},
        "clients": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"country": {"type": "string"}, "share": _NUMBER},
            },
        },
    },
}
EXPORT_FORMATS = ("yaml", "json")


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

    @extend_schema(
        operation_id="fleet_export",
        summary="Export the stored fleet as a fleet file",
        description="YAML by default (the same text as `manage.py export_fleet`); "
        "`?format=json` (or `Accept: application/json`) returns the same document as JSON. "
        "Applying the export is a no-op. Errors are JSON, whatever the format asked for.",
        parameters=[
            OpenApiParameter(
                "format",
                OpenApiTypes.STR,
                enum=list(EXPORT_FORMATS),
                description="yaml (the default) or json; any other value is a 400",
            )
        ],
        responses={
            (200, "text/yaml"): FLEET_DOCUMENT,
            (200, "application/json"): FLEET_DOCUMENT,
            400: OpenApiResponse(ERROR, description="`format` is neither yaml nor json."),
        },
        tags=["fleet"],
    )
    def get(self, request: Request) -> Response:
        return Response(fleet_to_dict(fleet_snapshot()))

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        self.request.accepted_renderer = renderers.JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return response
