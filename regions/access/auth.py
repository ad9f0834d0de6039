"""``Authorization: Bearer <token>`` for API and agent tokens, with a short-lived cache.

Resolving a secret costs a database query, and the hot paths (heartbeats, decisions) would
pay it on every request. So a resolved principal is kept in process memory, keyed by the
secret's hash, for at most ``TOKEN_TTL_S`` seconds. How stale it may get:

- a revoke, a role change or a deletion saved through the ORM (the API, the admin,
  ``create_token``, drills, the demo) bumps the token version (signals at the bottom):
  the saving process drops its cache at once, other processes sharing the Redis hot state
  within ``VERSION_CHECK_S`` (0.2 s); any configuration change flushes the cache too;
- a change that bypasses the signals (a queryset ``update()``, raw SQL, a command run
  against the embedded demo's SQLite from another shell) is seen when the entry expires:
  **a revoked token stops working within ``TOKEN_TTL_S`` (5 s) at most.**

Unknown and revoked secrets are never cached, so a new token works at once and garbage
cannot fill the cache; the cache holds at most ``MAX_CACHED`` principals.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from regions import hotstate
from regions.access.tokens import AGENT_PREFIX, hash_secret
from regions.audit.trail import Actor, client_address, set_actor
from regions.models import ROLE_RANK, AgentToken, ApiToken, Role

# Touch last_used_at at most this often, to keep reads free of writes.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
# The longest a resolved principal is trusted without asking the database again.
TOKEN_TTL_S = 5.0
MAX_CACHED = 10_000


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
        act_as(user, client_address(request._request))
        return user, user.token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def act_as(user: TokenUser, source: str) -> None:
    """Attribute what the request writes to its token (the audit trail's actor)."""
    set_actor(Actor(f"token:{user.token.name}", "token", source))


class TokenCache:
    """Principals by secret hash, each trusted for ``ttl_s`` and while the version holds."""

    def __init__(
        self, ttl_s: float, size: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self.clock = clock
        self._entries: dict[str, tuple[float, TokenUser]] = {}
        self._version: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def get(self, key_hash: str) -> TokenUser | None:
        """Return the cached principal, or None when absent, expired or invalidated."""
        self._check_version()
        found = self._entries.get(key_hash)
        if found is None:
            return None
        if found[0] <= self.clock():
            self._entries.pop(key_hash, None)
            return None
        return found[1]

    def put(self, key_hash: str, user: TokenUser, version: tuple[int, int]) -> None:
        """Keep ``user``, unless the version moved on while it was read from the database."""
        with self._lock:
            if version != self._version:
                return
            if len(self._entries) >= self.size:
                self._entries.clear()  # a burst of distinct tokens: start over, stay bounded
            self._entries[key_hash] = (self.clock() + self.ttl_s, user)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def version(self) -> tuple[int, int]:
        """The versions every cached principal was read under (config, tokens)."""
        return self._check_version()

    def _check_version(self) -> tuple[int, int]:
        store = hotstate.get()
        version = (store.config_version(), store.token_version())
        if version != self._version:
            with self._lock:
                if version != self._version:
                    self._entries.clear()
                    self._version = version
        return version


cache = TokenCache(TOKEN_TTL_S, MAX_CACHED)


def cached_token(secret: str) -> TokenUser | None:
    """The principal of ``secret`` when the cache holds it (never touches the database)."""
    return cache.get(hash_secret(secret))


def resolve_token(secret: str) -> TokenUser | None:
    """The principal of an active token, or None (cached: see the module docstring)."""
    key_hash = hash_secret(secret)
    user = cache.get(key_hash)
    if user is not None:
        return user
    version = cache.version()
    model: type[ApiToken] | type[AgentToken] = (
        AgentToken if secret.startswith(AGENT_PREFIX) else ApiToken
    )
    token = model.objects.filter(key_hash=key_hash, revoked_at__isnull=True).first()
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        # A queryset update: no audit row for bookkeeping, no race with a revoke.
        model.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    role = "agent" if isinstance(token, AgentToken) else token.role
    user = TokenUser(name=token.name, role=role, token=token)
    cache.put(key_hash, user, version)
    return user


def _token_changed(**kwargs: Any) -> None:
    """Drop cached principals now and once the write commits (a reader may cache in between)."""
    if kwargs.get("raw"):
        return
    hotstate.get().bump_token_version()
    cache.clear()
    transaction.on_commit(hotstate.get().bump_token_version)


for _model in (ApiToken, AgentToken):
    post_save.connect(
        _token_changed, sender=_model, dispatch_uid=f"token-cache-save-{_model.__name__}"
    )
    post_delete.connect(
        _token_changed, sender=_model, dispatch_uid=f"token-cache-del-{_model.__name__}"
    )
