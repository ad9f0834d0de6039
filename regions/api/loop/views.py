"""Control-loop API: heartbeats, the routing table and its history, the L7 decision, actions.

Thin views: each parses what is HTTP-specific (query flags) and calls a service. Under ASGI
most heartbeats and decisions are answered by ``regions.api.fastfront`` before they reach
Django; these views describe both routes in the OpenAPI schema and answer whatever the front
passes on.
"""

from __future__ import annotations

import time
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from regions import hotstate, metrics
from regions.access.permissions import has_role
from regions.api.decide import route_reply
from regions.api.parsers import JSONParser, flag
from regions.api.schema import ERROR
from regions.api.throttling import LoopRateThrottle
from regions.decisions import completions
from regions.decisions import route as decisions
from regions.errors import bad_input
from regions.fleet import snapshot
from regions.loop import actions, ingest
from regions.models import Role, RoutingTableVersion
from regions.validation import Field, number, obj, parse_json, validate
from trafficmgr.routing.table_json import table_to_json

WEIGHT_BODY = obj({"weight": Field(number(0, 1000))})


ACTION_FLAGS = [
    OpenApiParameter("dry_run", OpenApiTypes.BOOL, description="only answer the plan"),
    OpenApiParameter(
        "force", OpenApiTypes.BOOL, description="apply even if the safety valve refuses (admin)"
    ),
]


class HeartbeatView(APIView):
    """Take one heartbeat from an agent (agent tokens only, for their own endpoints)."""

    parser_classes = [JSONParser]  # the body is read as JSON whatever its type says
    agent_allowed = True
    agent_only = True
    throttle_classes = [LoopRateThrottle]

    def permission_denied(self, request: Request, message: Any = None, code: Any = None) -> None:  # type: ignore[override]
        reason = "unauthenticated" if request.user is None else "not_an_agent_token"
        metrics.count_ingest(False, reason)
        super().permission_denied(request, message, code)

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        result = ingest.ingest(request.auth, request.body, time.time())  # type: ignore[arg-type]
        return Response(result.body)


class DrillPollView(APIView):
    """A silenced agent asks for its pending drill instruction; no heartbeat is recorded.

    An agent obeying a ``silence`` drill sends no heartbeats, so it reads no replies; it polls
    here every few seconds instead, so that an abort reaches it at once rather than when the
    instruction expires. The instruction is handed over once, as with a heartbeat's reply.
    """

    agent_allowed = True
    agent_only = True
    throttle_classes = [LoopRateThrottle]

    @extend_schema(
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description='`{"drill": ... or null}`'),
            400: OpenApiResponse(ERROR, description="No endpoint of that name."),
        }
    )
    def get(self, request: Request, name: str) -> Response:
        ref = ingest.bound_endpoint(request.auth, name)  # type: ignore[arg-type]
        return Response({"drill": hotstate.get().pop_drill(ref.endpoint.name)})


class RoutingTableView(APIView):
    """The published routing table (before the first tick: the static one, ``source``)."""

    read_role = Role.VIEWER

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        now = time.time()
        table, source = decisions.current_table(snapshot.current(), now)
        return Response({**table_to_json(table), "source": source})


class TableVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = RoutingTableVersion
        fields = ["version", "generated_at", "reason", "diff"]


class TableVersionDetailSerializer(serializers.ModelSerializer):
    class Meta:
        model = RoutingTableVersion
        fields = ["version", "generated_at", "reason", "diff", "table"]


class RoutingHistoryView(generics.ListAPIView):
    """Recorded table versions, newest first, each with its diff against the previous one."""

    queryset = RoutingTableVersion.objects.defer("table").order_by("-generated_at", "-id")
    serializer_class = TableVersionSerializer
    read_role = Role.VIEWER


class RoutingVersionView(generics.RetrieveAPIView):
    """One recorded version with its full table."""

    queryset = RoutingTableVersion.objects.all()
    serializer_class = TableVersionDetailSerializer
    lookup_field = "version"
    read_role = Role.VIEWER


class RouteView(APIView):
    """The L7 decision: region and endpoint for one request (any API token)."""

    parser_classes = [JSONParser]
    write_role = Role.VIEWER
    throttle_classes = [LoopRateThrottle]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        status, body, headers = route_reply(request.body)
        return Response(body, status=status, headers=headers)


COMPLETIONS_EXAMPLE = {
    "completions": [
        {
            "endpoint": "euw-1",
            "model": "llama-3-8b",
            "input_tokens": 1800,
            "output_tokens": 212,
            "latency_ms": 2310.5,
            "prefix_hashes": [8215390144823, 1139802270112],
        }
    ]
}


class CompletionsView(APIView):
    """Completed requests a gateway reports (any API token): the pickers learn from them.

    1 to 1,000 items per call, validated whole: the first bad item refuses the batch (400
    naming ``completions[i].field``) and nothing is stored; else 202 ``{"accepted": N}``.
    """

    parser_classes = [JSONParser]
    write_role = Role.VIEWER
    throttle_classes = [LoopRateThrottle]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            202: OpenApiResponse(OpenApiTypes.OBJECT, description='`{"accepted": N}`'),
        },
        examples=[
            OpenApiExample("one completion", value=COMPLETIONS_EXAMPLE, request_only=True),
            OpenApiExample(
                "accepted", value={"accepted": 1}, response_only=True, status_codes=["202"]
            ),
        ],
        description=(
            "Each item: `endpoint`, `model` (served by that endpoint per the fleet), "
            "`input_tokens` and `output_tokens` (0..1,000,000), `latency_ms` (from sending "
            "the request to the endpoint until its last token; more than 0, under an hour), "
            "optional `prefix_hashes` (as for `route`). The first bad item refuses the whole "
            "report (400 naming `completions[i].field`); nothing is stored."
        ),
    )
    def post(self, request: Request) -> Response:
        return Response({"accepted": completions.report(request.body)}, status=202)


class ActionView(APIView):
    """Operator actions with ``?dry_run=1`` (the plan) and ``?force=1`` (admin, past the valve).

    Drain, undrain, pause and resume take no body; a weight takes ``{"weight": 0..1000}``
    (``WeightView``).
    """

    parser_classes = [JSONParser]
    write_role = Role.OPERATOR
    kind = "region"
    verb = "drain"

    @extend_schema(request=None, parameters=ACTION_FLAGS, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, name: str) -> Response:
        return self.perform(request, name)

    def perform(self, request: Request, name: str) -> Response:
        action = actions.OperatorAction(self.verb, self.kind, name, self.weight(request))
        body = actions.perform(
            action,
            dry_run=flag(request, "dry_run"),
            force=flag(request, "force"),
            may_force=has_role(request.user, Role.ADMIN),
        )
        return Response(body)

    def weight(self, request: Request) -> float | None:
        if self.verb != "weight":
            return None
        with bad_input():
            doc = validate(WEIGHT_BODY, parse_json(request.body))
        return float(doc["weight"])


class WeightView(ActionView):
    """Set a region's weight (``{"weight": 0..1000}``), with the plan first like every action."""

    verb = "weight"

    @extend_schema(
        request=inline_serializer(
            "RegionWeight",
            {"weight": serializers.FloatField(min_value=0, max_value=1000)},
        ),
        parameters=ACTION_FLAGS,
        responses=OpenApiTypes.OBJECT,
    )
    def post(self, request: Request, name: str) -> Response:
        return self.perform(request, name)
