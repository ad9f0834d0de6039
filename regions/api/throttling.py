from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle


class TokenRateThrottle(SimpleRateThrottle):
    """Rate limit per token (or per user / client address without one)."""

    scope = "token"

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
