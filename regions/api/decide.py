"""The answer of ``POST /api/v1/route``, the same from the DRF view and the ASGI front."""

from __future__ import annotations

from typing import Any

from regions.api.errors import error_body
from regions.decisions import route as decisions
from regions.fleet import snapshot


def route_reply(
    body: bytes, view: snapshot.FleetView | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Decide one request: (status, body, headers); 503 with Retry-After for no capacity."""
    try:
        decision = decisions.decide(body, view=view)
    except decisions.NoCapacity as exc:
        return 503, error_body(exc.code, exc.detail), {"Retry-After": str(exc.retry_after)}
    return 200, decision.as_json(), {}
