"""``Authorization: Bearer <token>`` for API and agent tokens."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from regions.audit import Actor, client_address, set_actor
from regions.models import ROLE_RANK, AgentToken, ApiToken, Role
from regions.tokens import AGENT_PREFIX, hash_secret

# Touch last_used_at at most this often, to keep reads free of writes.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


@dataclass(frozen=True)
class TokenUser:
    """The principal behind a bearer token (DRF's request.user)."""

    name: str
    role: str  # viewer | operator | admin | agent
    token: ApiToken | AgentToken

    is_authenticated = True
    is_anonymous = False
    is_active = True

    @property
    def is_agent(self) -> bool:
        return self.role == "agent"

    def has_role(self, role: str) -> bool:
        return not self.is_agent and ROLE_RANK.get(Role(self.role), 0) >= ROLE_RANK[Role(role)]

    def get_username(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TokenUser, Any] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'")
        try:
            secret = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("token holds non-ASCII bytes") from exc
        user = resolve_token(secret)
        if user is None:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        set_actor(Actor(f"token:{user.token.name}", "token", client_address(request._request)))
        return user, user.token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def resolve_token(secret: str) -> TokenUser | None:
    """The principal of an active token, or None."""
    model: type[ApiToken] | type[AgentToken] = (
        AgentToken if secret.startswith(AGENT_PREFIX) else ApiToken
    )
    token = model.objects.filter(key_hash=hash_secret(secret), revoked_at__isnull=True).first()
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        # A queryset update: no audit row for bookkeeping, no race with a revoke.
        model.objects.filter(pk=token.pk).update(last_used_at=now)
    role = "agent" if isinstance(token, AgentToken) else token.role
    return TokenUser(name=token.name, role=role, token=token)
