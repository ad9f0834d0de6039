"""Events as the control loop records them (its own ``record_events``), for the alert tests."""

from __future__ import annotations

from typing import Any

from tests.regions.alerts.conftest import T0


def region_event(region: str, old: str, new: str, seconds: float = 0.0) -> None:
    """Record a region transition ``old`` → ``new`` at T0 + ``seconds``."""
    from regions.loop.history import record_events
    from trafficmgr.routing.failover import Transition
    from trafficmgr.routing.types import RegionState

    at = T0 + seconds
    moved = Transition(region, RegionState(old), RegionState(new), at, f"{new}: test")
    record_events([moved], [], "v-test", at)


def endpoint_event(region: str, endpoint: str, healthy: bool, seconds: float = 0.0) -> None:
    """Record an endpoint health flip at T0 + ``seconds``."""
    from regions.loop.history import record_events

    flip: dict[str, Any] = {
        "region": region,
        "endpoint": endpoint,
        "healthy": healthy,
        "reason": "no heartbeat" if not healthy else "heartbeats back",
    }
    record_events([], [flip], "v-test", T0 + seconds)
