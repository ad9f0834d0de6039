"""``POST fleet/apply`` (plan, then apply) and ``GET fleet/export`` (the stored fleet)."""

from __future__ import annotations

from typing import Any

import yaml
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, parsers, renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from regions.access.permissions import has_role
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
    parser_classes = [YamlParser, XYamlParser, TextYamlParser, PlainTextParser, parsers.JSONParser]

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


class FleetExportView(APIView):
    """The stored fleet as a fleet file (YAML), or as JSON with ``?format=json``."""

    renderer_classes = [YamlRenderer, renderers.JSONRenderer]

    @extend_schema(
        operation_id="fleet_export",
        summary="Export the stored fleet as a fleet file",
        description="YAML by default (the same text as `manage.py export_fleet`); "
        "`?format=json` (or `Accept: application/json`) returns the same document as JSON. "
        "Applying the export is a no-op.",
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["yaml", "json"])],
        responses={
            (200, "text/yaml"): OpenApiTypes.STR,
            (200, "application/json"): OpenApiTypes.OBJECT,
        },
        tags=["fleet"],
    )
    def get(self, request: Request) -> Response:
        return Response(fleet_to_dict(fleet_snapshot()))
