"""The OpenAPI description of fleet apply and export: the plan's shape and the fleet file's."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from regions.api.schema import ERROR
from regions.fleet.plan import TYPES

EXPORT_FORMATS = ("yaml", "json")


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

APPLY_SCHEMA: dict[str, Any] = dict(
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
EXPORT_SCHEMA: dict[str, Any] = dict(
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
