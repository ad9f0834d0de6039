"""The state an endpoint is shown in: each tick's verdict, held by a band and a hold-down.

``EndpointHealth.state`` judges one heartbeat. An endpoint whose TTFT p99 hovers around its
objective would read degraded, healthy, degraded on consecutive ticks, and an operator would
watch it flicker. The state shown follows the verdict with the rules the failover state
machine applies to regions (``failover.py``):

- degraded once the strain reaches ``STRAINED``; healthy again only under ``CALM_BELOW``
  (the band), so an endpoint just under its objective stays degraded;
- a change between healthy and degraded waits ``hold_down_s`` since the previous change, so
  it changes at most about once per hold-down;
- down and unknown are shown at once (endpoint health already tolerates ``miss_threshold``
  missed heartbeats; safety first), and an endpoint back from them starts from its verdict.

Traffic does not wait for the shown state: headroom and a region's strain take each tick's
strain (``health.py``), and the region's own machine holds the region's state. The control
loop carries each endpoint's state from tick to tick in the evaluation it keeps in the hot
state (``regions/loop/control.py``), as it carries the regions' machines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trafficmgr.routing.health import CALM_BELOW, EndpointHealth

SERVING = ("healthy", "degraded")
STATES = ("unknown", "down", *SERVING)


@dataclass(frozen=True, slots=True)
class EndpointState:
    """What an endpoint is shown as, carried from tick to tick."""

    state: str  # unknown | down | degraded | healthy
    since: float  # when it entered ``state``


def step_endpoint(
    health: EndpointHealth, previous: EndpointState | None, hold_down_s: float, now: float
) -> EndpointState:
    """Advance one endpoint's shown state by one evaluation."""
    verdict = health.state
    if previous is not None and previous.state == verdict:
        return previous
    if previous is None or previous.state not in SERVING or verdict not in SERVING:
        return EndpointState(verdict, now)
    if now - previous.since < hold_down_s:
        return previous
    if verdict == "healthy" and health.strain >= CALM_BELOW:
        return previous  # inside the band: still too near its objective
    return EndpointState(verdict, now)


def shown_reason(
    health: EndpointHealth, shown: EndpointState, hold_down_s: float, now: float
) -> str:
    """Return the verdict's reason, and why the state shown differs from it when it does."""
    if shown.state == health.state:
        return health.reason
    left = max(0.0, hold_down_s - (now - shown.since))
    if shown.state == "degraded":
        if health.strain >= CALM_BELOW:
            return (
                f"{health.reason}; strain {health.strain:.2f}: healthy again under {CALM_BELOW:g}"
            )
        return f"{health.reason}; healthy again after the hold-down ({left:.0f} s)"
    return f"{health.reason}; degraded if it lasts the hold-down ({left:.0f} s)"


def state_to_doc(shown: EndpointState) -> dict[str, object]:
    """Return the fields an endpoint's evaluation document carries to the next tick."""
    return {"state": shown.state, "state_since": shown.since}


def state_from_doc(doc: object) -> EndpointState | None:
    """Read a carried state back (``state_to_doc``); None when it is missing or unusable."""
    if not isinstance(doc, Mapping):
        return None
    state, since = doc.get("state"), doc.get("state_since")
    if state not in STATES or isinstance(since, bool) or not isinstance(since, int | float):
        return None
    return EndpointState(str(state), float(since)) if math.isfinite(since) else None
