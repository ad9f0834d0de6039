"""Drills API: start (operator), list and read with the report, abort (operator).

``POST /api/v1/drills/`` ``{"kind", "target", "duration_s", "params"?, "force"?}`` answers
201 ``{"id", "status": "pending", ...}`` and runs the drill in the background; bad input is
a 400 naming the field; a drill the guardrails refuse is stored as ``refused`` and answered
409 with its ``id`` and ``reason``; ``force`` (body or ``?force=1``) is for admins only.

``POST /api/v1/drills/?dry_run=1`` with the same body starts nothing and stores nothing: it
answers 200 with what the guardrails say now (``allowed``, ``refusals`` each with whether an
admin may force it, the figures behind them: demand, capacity left during the fault, strict
residency zones), so that an operator sees the preview before starting the drill.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from regions.access.permissions import has_role
from regions.api.filters import Filter, QueryFilter
from regions.api.parsers import JSONParser, flag
from regions.drills import guardrails, service, tasks
from regions.errors import DomainError
from regions.fleet import snapshot
from regions.fleet.actionplan import check_may_force
from regions.models import Drill, DrillStatus, Role
from regions.validation import Invalid, check_bounds, parse_json

BODY_KEYS = ("kind", "target", "duration_s", "params", "force")
MAX_BODY_BYTES = 16 * 1024


class DrillSerializer(serializers.ModelSerializer):
    class Meta:
        model = Drill
        fields = [
            "id",
            "kind",
            "target",
            "duration_s",
            "params",
            "status",
            "forced",
            "reason",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class DrillDetailSerializer(DrillSerializer):
    report = serializers.SerializerMethodField()

    class Meta(DrillSerializer.Meta):
        fields = [*DrillSerializer.Meta.fields, "report"]
        read_only_fields = fields

    def get_report(self, drill: Drill) -> dict[str, Any] | None:
        found = getattr(drill, "report", None)
        return found.report if found is not None else None


def read_body(request: Request) -> dict[str, Any]:
    """Parse a drill request strictly: a JSON object of known keys."""
    if len(request.body) > MAX_BODY_BYTES:
        raise DomainError("drill body too large", code="too_large", status_code=413)
    try:
        doc = parse_json(request.body)
        check_bounds(doc)  # stored as given (params): no control characters, bounded
    except Invalid as exc:
        raise service.invalid(exc.field, exc.message) from None
    if not isinstance(doc, dict):
        raise service.invalid("body", "expected a JSON object")
    for key in doc:
        if key not in BODY_KEYS:
            raise service.invalid(str(key)[:64], f"unknown field (known: {', '.join(BODY_KEYS)})")
    for key in ("kind", "target", "duration_s"):
        if key not in doc:
            raise service.invalid(key, "this field is required")
    if "force" in doc and not isinstance(doc["force"], bool):
        raise service.invalid("force", "expected true or false")
    return doc


def preview(doc: dict[str, Any], force: bool, may_force: bool) -> dict[str, Any]:
    """What the guardrails say of a drill now, without starting or storing it."""
    view = snapshot.load()
    spec = service.resolve(
        view.fleet, doc["kind"], doc["target"], doc["duration_s"], doc.get("params")
    )
    check_may_force(force, may_force, "a drill")
    check = guardrails.preflight(spec, view)
    plan = check.plan
    return {
        "dry_run": True,
        "kind": spec.kind,
        "target": spec.target,
        "duration_s": spec.duration_s,
        "resolved": spec.resolved(),
        "allowed": not plan.blocking(force),
        "forced": plan.forced(force),
        "forceable": plan.forceable,
        "refusals": [r.as_dict() for r in plan.unsafe],
        "guardrails": check.figures,
    }


class DrillListView(generics.ListAPIView):
    """Drills, newest first (filter by ``target``, ``kind``, ``status``); POST starts one."""

    queryset = Drill.objects.order_by("-created_at", "-id")
    serializer_class = DrillSerializer
    filter_backends = [QueryFilter]
    query_filters = {
        "target": Filter("target"),
        "kind": Filter.of_choices("kind", service.KINDS),
        "status": Filter.of_choices("status", DrillStatus.values),
    }
    read_role = Role.VIEWER
    write_role = Role.OPERATOR
    parser_classes = [JSONParser]  # read_body reads the body as JSON whatever its type says

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={201: DrillSerializer, 200: OpenApiTypes.OBJECT},
        parameters=[
            OpenApiParameter(
                "dry_run",
                OpenApiTypes.BOOL,
                description="start nothing: answer 200 with what the guardrails say now",
            )
        ],
    )
    def post(self, request: Request) -> Response:
        doc = read_body(request)
        if flag(request, "dry_run"):
            force = bool(doc.get("force")) or flag(request, "force")
            return Response(preview(doc, force, has_role(request.user, Role.ADMIN)))
        drill = service.create_drill(
            doc["kind"],
            doc["target"],
            doc["duration_s"],
            doc.get("params"),
            force=bool(doc.get("force")) or flag(request, "force"),
            may_force=has_role(request.user, Role.ADMIN),
        )
        tasks.dispatch(drill.pk)
        return Response(DrillSerializer(drill).data, status=status.HTTP_201_CREATED)


class DrillDetailView(generics.RetrieveAPIView):
    """One drill with its status and, once it ended, its report."""

    queryset = Drill.objects.select_related("report")
    serializer_class = DrillDetailSerializer
    read_role = Role.VIEWER


class DrillAbortView(APIView):
    """Abort a pending or running drill: its fault is rolled back at once."""

    write_role = Role.OPERATOR
    parser_classes = [JSONParser]

    @extend_schema(request=None, responses={200: DrillSerializer})
    def post(self, request: Request, pk: int) -> Response:
        drill = service.abort_drill(int(pk))
        return Response(DrillSerializer(drill).data)
