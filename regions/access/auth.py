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

Unknown secrets are remembered as unknown (``MAX_UNKNOWN`` of them, for ``TOKEN_TTL_S``) until
the token version moves, which every token write through the ORM does: a new token works at
once, and a client retrying a wrong token costs one query, not one per request. A secret that
is not shaped like one this project issues (prefix and length) is refused without a query,
so such requests never open a database connection. The cache holds at most ``MAX_CACHED``
principals.

**Fail static.** When the database cannot be reached, a principal resolved before (at most
``STALE_MAX_S`` ago) keeps working from the cache: a PostgreSQL outage must not look like
every agent going silent. Revocations still win: a revoke bumps the token version, which
drops every cached principal, and once the database answers again an expired entry is
checked there before use. A secret not held is refused during the outage; for an agent
token the refusal is recorded as the control plane's own impairment (its heartbeats go
missing for our reasons: ``regions.hotstate.impairment``).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from regions import hotstate, metrics
from regions.access.tokens import AGENT_PREFIX, API_PREFIX, hash_secret
from regions.audit.trail import Actor, client_address, set_actor
from regions.hotstate import impairment
from regions.models import ROLE_RANK, AgentToken, ApiToken, Role

# Touch last_used_at at most this often, to keep reads free of writes.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
# The longest a resolved principal is trusted without asking the database again.
TOKEN_TTL_S = 5.0
MAX_CACHED = 10_000
MAX_UNKNOWN = 10_000
# The longest a resolved principal keeps working from the cache while the database is away.
STALE_MAX_S = 3600.0
# Issued secrets: a prefix and ``secrets.token_urlsafe(32)`` (43 characters of base64url).
SECRET_LENGTH = 4 + 43
_SECRET_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


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
    """Principals by secret hash, each trusted for ``ttl_s`` and while the version holds.

    An expired principal is kept (``stale``) for ``stale_s`` more, for when the database
    cannot be asked; a token write (the token version moving) drops everything, a
    configuration write only expires what is held.
    """

    def __init__(
        self,
        ttl_s: float,
        size: int,
        clock: Callable[[], float] = time.monotonic,
        stale_s: float = STALE_MAX_S,
    ) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self.clock = clock
        self.stale_s = stale_s
        self._entries: dict[str, tuple[float, TokenUser]] = {}
        self._unknown: dict[str, float] = {}  # secret hash → until when it is known unknown
        self._version: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def get(self, key_hash: str) -> TokenUser | None:
        """Return the cached principal, or None when absent, expired or invalidated."""
        self._check_version()
        found = self._entries.get(key_hash)
        if found is None or found[0] <= self.clock():
            return None
        return found[1]

    def stale(self, key_hash: str) -> TokenUser | None:
        """Return the principal held for ``key_hash`` even if expired (within ``stale_s``)."""
        found = self._entries.get(key_hash)
        if found is None or found[0] + self.stale_s <= self.clock():
            return None
        return found[1]

    def known_unknown(self, key_hash: str) -> bool:
        """Whether the database said, under the current version, that no such token exists."""
        self._check_version()
        until = self._unknown.get(key_hash)
        return until is not None and until > self.clock()

    def put(self, key_hash: str, user: TokenUser, version: tuple[int, int]) -> None:
        """Keep ``user``, unless the version moved on while it was read from the database."""
        with self._lock:
            if version != self._version:
                return
            if len(self._entries) >= self.size:
                self._entries.clear()  # a burst of distinct tokens: start over, stay bounded
            self._entries[key_hash] = (self.clock() + self.ttl_s, user)
            self._unknown.pop(key_hash, None)

    def put_unknown(self, key_hash: str, version: tuple[int, int]) -> None:
        """Remember that no active token has this hash (until the version moves)."""
        with self._lock:
            if version != self._version:
                return
            if len(self._unknown) >= MAX_UNKNOWN:
                self._unknown.clear()
            self._unknown[key_hash] = self.clock() + self.ttl_s
            self._entries.pop(key_hash, None)

    def forget(self, key_hash: str) -> None:
        with self._lock:
            self._entries.pop(key_hash, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._unknown.clear()

    def version(self) -> tuple[int, int]:
        """The versions every cached principal was read under (config, tokens); (-1, -1)
        while the hot state cannot tell (nothing read then is cached)."""
        return self._check_version() or (-1, -1)

    def _check_version(self) -> tuple[int, int] | None:
        try:
            store = hotstate.get()
            version = (store.config_version(), store.token_version())
        except Exception:  # the hot state is away: what is held stays as it is (a partition
            # costs one timeout, then the store's breaker refuses at once: no wait per request)
            return self._version
        if version != self._version:
            with self._lock:
                if version != self._version:
                    self._changed(version)
        return version

    def _changed(self, version: tuple[int, int]) -> None:
        """A token write drops everything; a configuration write expires what is held."""
        old = self._version
        self._unknown.clear()
        if old is None or old[1] != version[1]:
            self._entries.clear()
        else:
            self._entries = {k: (0.0, user) for k, (_, user) in self._entries.items()}
        self._version = version


cache = TokenCache(TOKEN_TTL_S, MAX_CACHED)
# After a failed lookup the database is not asked again for 2 s (shared with the fleet view
# and the loop): an outage costs one connection timeout per process every 2 s.
database = impairment.database


def cached_token(secret: str) -> TokenUser | None:
    """The principal of ``secret`` when the cache holds it (never touches the database);
    while the database is known to be away, also one held past its TTL (fail static)."""
    key_hash = hash_secret(secret)
    user = cache.get(key_hash)
    if user is None and database.open:
        user = cache.stale(key_hash)
    return user


def well_formed(secret: str) -> bool:
    """Whether ``secret`` is shaped like a secret this project issues (no database needed)."""
    return (
        len(secret) == SECRET_LENGTH
        and secret[:4] in (API_PREFIX, AGENT_PREFIX)
        and _SECRET_CHARS.issuperset(secret[4:])
    )


def resolve_token(secret: str) -> TokenUser | None:
    """The principal of an active token, or None (cached: see the module docstring)."""
    if not well_formed(secret):
        return None
    key_hash = hash_secret(secret)
    user = cache.get(key_hash)
    if user is not None:
        return user
    if cache.known_unknown(key_hash):
        return None
    version = cache.version()
    try:
        if database.open:
            raise DatabaseError("the database failed moments ago; not asked again yet")
        user = _from_database(secret, key_hash)
    except DatabaseError:
        if not database.open:
            database.failed()
        held = cache.stale(key_hash)
        if held is None:
            if secret.startswith(AGENT_PREFIX):  # a heartbeat refused for our own reasons
                hotstate.note_impairment()
            raise
        metrics.count_fail_static("token")
        return held
    database.succeeded()
    if user is None:
        cache.put_unknown(key_hash, version)
    else:
        cache.put(key_hash, user, version)
    return user


def _from_database(secret: str, key_hash: str) -> TokenUser | None:
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
    return TokenUser(name=token.name, role=role, token=token)


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
