"""Configuration API: regions, endpoints, GPU profiles, residency, failover, events, audit.

Viewsets only declare data; the behaviour lives in the base classes below, the
serializers, the filters and the one error handler.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from regions.access.issue import TOKEN_ROLES, create_token
from regions.access.permissions import has_role
from regions.api.filters import (
    Filter,
    refuse_unknown_params,
)
from regions.api.parsers import JSONParser
from regions.api.schema import ERROR
from regions.api.serializers import (
    AuditLogSerializer,
    EndpointSerializer,
    EventSerializer,
    FailoverPolicySerializer,
    GpuProfileSerializer,
    RegionSerializer,
    ResidencyRuleSerializer,
    TokenCreatedSerializer,
    TokenCreateSerializer,
    TokenSerializer,
)
from regions.api.viewsets import ANY_SEGMENT, ConfigViewSet, HistoryViewSet
from regions.audit.trail import current_actor
from regions.errors import DomainError
from regions.models import (
    AdminState,
    AgentToken,
    AlertChannel,
    ApiToken,
    AuditLog,
    Endpoint,
    Event,
    EventKind,
    FailoverPolicy,
    GpuProfile,
    Region,
    ResidencyMode,
    ResidencyRule,
    Role,
)

SINCE = Filter("at__gte", kind="datetime", description="only rows at or after this instant")
UNTIL = Filter("at__lt", kind="datetime", description="only rows before this instant")


class GpuProfileViewSet(ConfigViewSet):
    """GPU profiles: service rates per GPU type, for capacity and simulation."""

    queryset = GpuProfile.objects.all()
    serializer_class = GpuProfileSerializer
    ordering_fields = ["name", "max_concurrency", "decode_tokens_per_s", "prefill_tokens_per_s"]


class RegionViewSet(ConfigViewSet):
    """Regions: location, ingress addresses answered by DNS, priority, admin state."""

    queryset = Region.objects.all()
    serializer_class = RegionSerializer
    query_filters = {
        "admin_state": Filter.of_choices("admin_state", AdminState.values),
        "country": Filter("country"),
    }
    ordering_fields = ["name", "priority", "weight", "country", "created_at"]


class EndpointViewSet(ConfigViewSet):
    """Endpoints: GPU servers inside a region, the models they serve, their weight."""

    queryset = Endpoint.objects.select_related("region", "gpu")
    serializer_class = EndpointSerializer
    query_filters = {
        "region": Filter("region__name"),
        "gpu": Filter("gpu__name"),
        "admin_state": Filter.of_choices("admin_state", AdminState.values),
    }
    ordering_fields = ["name", "region__name", "gpus", "weight", "created_at"]
    search_fields = ["name", "address"]


class ResidencyRuleViewSet(ConfigViewSet):
    """Residency rules: clients of these countries/continents may only use these regions."""

    queryset = ResidencyRule.objects.prefetch_related("regions")
    serializer_class = ResidencyRuleSerializer
    query_filters = {
        "region": Filter("regions__name", description="rules allowing this region"),
        "mode": Filter.of_choices("mode", ResidencyMode.values),
    }
    ordering_fields = ["name", "mode", "created_at"]

    def get_queryset(self) -> QuerySet[ResidencyRule]:
        # Filtering through the many-to-many join may repeat a rule.
        return super().get_queryset().distinct()


class FailoverPolicyViewSet(ConfigViewSet):
    """Failover policies: health thresholds, hold-downs, slow start, all-down behaviour."""

    queryset = FailoverPolicy.objects.all()
    serializer_class = FailoverPolicySerializer
    ordering_fields = ["name"]


class EventViewSet(HistoryViewSet):
    """Events: health transitions, failovers, drills and manual actions, newest first."""

    queryset = Event.objects.all()
    serializer_class = EventSerializer
    query_filters = {
        "region": Filter("region"),
        "endpoint": Filter("endpoint"),
        "kind": Filter.of_choices("kind", EventKind.values),
        "severity": Filter("severity"),
        "since": SINCE,
        "until": UNTIL,
    }


class AuditLogViewSet(HistoryViewSet):
    """The audit log: who changed what, when, from where; append-only, newest first.

    Rows about tokens are for admins only, like the tokens themselves: other readers never
    see them, in lists, counts or by id.
    """

    queryset = AuditLog.objects.all()
    serializer_class = AuditLogSerializer

    query_filters = {
        "actor": Filter("actor"),
        "action": Filter("action"),
        "object_type": Filter("object_type", description="model name, e.g. Region, Endpoint"),
        "object": Filter("object_repr", description="object name, e.g. eu-west"),
        "since": SINCE,
        "until": UNTIL,
    }

    def get_queryset(self) -> QuerySet[AuditLog]:
        rows: QuerySet[AuditLog] = super().get_queryset()
        if has_role(self.request.user, Role.ADMIN):
            return rows
        return rows.exclude(object_type__in=TOKEN_AUDIT_TYPES)


# What audit rows about tokens name as their object type (the models' names); alert channels
# too: their URLs and routing keys are credentials.
TOKEN_AUDIT_TYPES = (ApiToken.__name__, AgentToken.__name__, AlertChannel.__name__)
TOKEN_ID_RE = re.compile(r"(api|agent)-([0-9]{1,18})")
TOKEN_ID = OpenApiParameter(
    "token_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=r"^(api|agent)-[0-9]+$",
    description="`api-<n>` or `agent-<n>`, as listed",
)
REVOKE_REFUSALS = (
    "Refused with 409 `token_in_use` for the token the request itself uses, and with 409 "
    "`last_admin_token` for the last active admin token: either would lock the caller, or "
    "every automation, out of the API. Revoking a revoked token changes nothing."
)
REVOKE_REFUSED = OpenApiResponse(
    ERROR, description="`token_in_use` or `last_admin_token`; nothing was revoked."
)
TOKEN_FILTERS = {
    "role": Filter.of_choices("role", TOKEN_ROLES),
    "active": Filter.of_choices("active", ("true", "false"), "false lists revoked tokens only"),
}


@extend_schema_view(
    list=extend_schema(
        summary="List API and agent tokens, newest first (never their secrets)",
        parameters=[
            OpenApiParameter(name, OpenApiTypes.STR, enum=list(spec.choices))
            for name, spec in TOKEN_FILTERS.items()
        ],
    ),
    retrieve=extend_schema(parameters=[TOKEN_ID]),
    create=extend_schema(
        summary="Create a token; the response carries its secret, shown this once",
        request=TokenCreateSerializer,
        responses={201: TokenCreatedSerializer},
    ),
    destroy=extend_schema(
        summary="Revoke a token (the row is kept, revoked_at set)",
        description=REVOKE_REFUSALS,
        parameters=[TOKEN_ID],
        responses={204: None, 409: REVOKE_REFUSED},
    ),
    revoke=extend_schema(
        summary="Revoke a token and return it",
        description=REVOKE_REFUSALS,
        parameters=[TOKEN_ID],
        request=None,
        responses={200: TokenSerializer, 409: REVOKE_REFUSED},
    ),
)
class TokenViewSet(viewsets.GenericViewSet):
    """API tokens (viewer, operator, admin) and agent tokens, in one list; admin only."""

    serializer_class = TokenSerializer
    parser_classes = [JSONParser]
    read_role = Role.ADMIN
    write_role = Role.ADMIN
    lookup_url_kwarg = "token_id"
    lookup_value_regex = ANY_SEGMENT

    def list(self, request: Request) -> Response:
        refuse_unknown_params(request, set(TOKEN_FILTERS))
        tokens: list[ApiToken | AgentToken] = [
            *ApiToken.objects.all(),
            *AgentToken.objects.select_related("region"),
        ]
        for name, spec in TOKEN_FILTERS.items():
            if (raw := request.query_params.get(name)) is not None:
                wanted = spec.parse(name, raw)
                tokens = [t for t in tokens if _token_attr(t, name) == wanted]
        tokens.sort(key=lambda t: (t.created_at, isinstance(t, ApiToken), t.pk), reverse=True)
        page: list[ApiToken | AgentToken] | None = self.paginate_queryset(tokens)  # type: ignore[arg-type]
        return self.get_paginated_response(TokenSerializer(page, many=True).data)

    def retrieve(self, request: Request, token_id: str) -> Response:
        return Response(TokenSerializer(self.get_object()).data)

    def create(self, request: Request) -> Response:
        form = TokenCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        token, secret = create_token(**form.validated_data, created_by=current_actor().name)
        body = {**TokenSerializer(token).data, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, token_id: str) -> Response:
        _revoke(self.get_object(), request.auth)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, token_id: str) -> Response:
        return Response(TokenSerializer(_revoke(self.get_object(), request.auth)).data)

    def get_object(self) -> ApiToken | AgentToken:
        match = TOKEN_ID_RE.fullmatch(self.kwargs["token_id"])
        if match is None:
            raise NotFound("token ids look like api-12 or agent-3")
        kind, pk = match.groups()
        if kind == "agent":
            return get_object_or_404(AgentToken.objects.select_related("region"), pk=int(pk))
        return get_object_or_404(ApiToken, pk=int(pk))


def _token_attr(token: ApiToken | AgentToken, name: str) -> str:
    if name == "role":
        return "agent" if isinstance(token, AgentToken) else str(token.role)
    return "true" if token.active else "false"


def _lock_active_admins() -> list[int]:
    """Lock every active admin token, in one order, and return their keys: of two revokes
    racing for the last two, the second reads the first's once it commits, and refuses.

    SQLite has no row locks and ignores ``select_for_update``; there a write as the
    transaction's first statement takes the database's write lock (waiting while another
    writer holds it), whatever the connection's transaction mode. Read first, a transaction
    would hold a snapshot the other's commit makes stale, and fail "database is locked".
    """
    active = ApiToken.objects.filter(role=Role.ADMIN, revoked_at__isnull=True)
    if connection.vendor == "sqlite":
        active.update(revoked_at=None)  # changes nothing; takes the lock
    return list(active.select_for_update().order_by("pk").values_list("pk", flat=True))


def _revoke(token: ApiToken | AgentToken, in_use: Any) -> ApiToken | AgentToken:
    """Set revoked_at once (a second revoke keeps the first instant), unless ``token`` is the
    one the request uses (``in_use``) or the last active admin token: 409 naming which."""
    if token.revoked_at is not None:
        return token
    if type(in_use) is type(token) and in_use.pk == token.pk:
        raise DomainError(
            "a token cannot revoke itself: this request is authenticated with it "
            "(revoke it with another admin token)",
            code="token_in_use",
        )
    with transaction.atomic():
        if isinstance(token, ApiToken) and token.role == Role.ADMIN:
            admins = _lock_active_admins()
            if token.pk not in admins:  # revoked meanwhile: keep that instant
                token.refresh_from_db()
                return token
            if admins == [token.pk]:
                raise DomainError(
                    f"{token.name!r} is the last active admin token: create another admin "
                    "token before revoking it",
                    code="last_admin_token",
                )
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
