"""The API's rate limit per token, counted in the shared cache."""

from __future__ import annotations

import threading
import time
from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from regions.api.outage import is_outage, note_outage
from regions.hotstate.impairment import Breaker

# This process's view of the rate limit's cache (shared by every request of the process).
cache_away = Breaker(2.0)


class TokenRateThrottle(SimpleRateThrottle):
    """Rate limit per token (or per user / client address without one).

    The counts live in the cache (Redis when configured). When it cannot be reached the
    limit is not enforced (fail open, as Envoy's rate limit filter does by default): a cache
    outage must not turn into an outage of the configuration API, which needs only the
    database. After a failure the cache is not asked for ``cache_away.retry_s``: a partitioned
    cache (a peer that never answers) costs the process one timeout per spell, not one per
    request.
    """

    scope = "token"

    def allow_request(self, request: Request, view: Any) -> bool:
        if cache_away.open:
            return True
        try:
            allowed = super().allow_request(request, view)
        except Exception as exc:
            if not is_outage(exc):
                raise
            cache_away.failed()
            note_outage(exc, request.path)
            return True
        cache_away.succeeded()
        return allowed

    def get_rate(self) -> str | None:
        # Read at request time (DRF reads it at import), so a settings override applies.
        rate: str | None = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)  # type: ignore[assignment]
        return rate

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        token = getattr(request, "auth", None)
        if token is not None and hasattr(token, "key_hash"):
            ident = f"{type(token).__name__}:{token.pk}"
        elif request.user is not None and getattr(request.user, "is_authenticated", False):
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


def parse_rate(rate: str) -> tuple[int, float]:
    """Read DRF's ``"<count>/<s|sec|m|min|h|hour|d|day>"``."""
    count, _, period = rate.partition("/")
    return int(count), {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}[period[:1]]


class LoopRateThrottle(BaseThrottle):
    """Per-token rate of the hot paths (heartbeats, decisions), counted in this process.

    Agents and gateways call these far more often than people call the rest of the API, and
    a shared counter would cost two cache round trips per request; so each process keeps a
    fixed-window count per token. The limit is ``DEFAULT_THROTTLE_RATES["loop"]`` (default
    120000/min) per process.
    """

    default_rate = "120000/min"
    _windows: dict[str, tuple[float, int]] = {}
    _lock = threading.Lock()

    def allow_request(self, request: Request, view: Any) -> bool:
        allowed, self._wait = self.take(ident(getattr(request, "auth", None)))
        return allowed

    def wait(self) -> float | None:
        return self._wait

    @classmethod
    def take(cls, key: str) -> tuple[bool, float]:
        """Count one request of ``key``; return whether it is within the rate, and the wait."""
        rate = api_settings.DEFAULT_THROTTLE_RATES.get("loop") or cls.default_rate
        count, period = parse_rate(str(rate))
        now = time.monotonic()
        with cls._lock:
            start, used = cls._windows.get(key, (now, 0))
            if now - start >= period:
                start, used = now, 0
            cls._windows[key] = (start, used + 1)
        return used < count, max(0.0, period - (now - start))


def ident(token: Any) -> str:
    """The rate-limit key of a token (the same for the DRF views and the ASGI front)."""
    return f"{type(token).__name__}:{getattr(token, 'pk', None)}"
