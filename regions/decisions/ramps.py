"""Slow start for ``POST /api/v1/route``: which endpoints ramp, and the candidates one
decision offers the picker.

The rules are the engine's (``routing.slowstart``), the ones the gateway's core applies: an
endpoint back from an outage takes from ``DEFAULT_FLOOR`` to all of its share over the
fleet's ``slow_start_s``, offered to the picker with its ramp's probability. When it came back
is the control loop's record (``since`` per endpoint in the stored evaluation); one this
process judges healthy from its latest heartbeat while the record says down is coming back
now, before the loop has noticed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from regions import hotstate
from trafficmgr.routing.pickbase import EndpointLoad
from trafficmgr.routing.slowstart import DEFAULT_FLOOR, offered, ramp, serving_since

log = logging.getLogger(__name__)


def recorded_health() -> Mapping[str, Any]:
    """Return the control loop's last record of each endpoint's health ({} when unreadable)."""
    try:
        endpoints = hotstate.get().evaluation().get("endpoints")
    except Exception:
        log.warning("reading the loop's evaluation failed", exc_info=True)
        return {}
    return endpoints if isinstance(endpoints, dict) else {}


@dataclass(slots=True)
class Ramps:
    """The endpoints of one region in their slow start, and the subsets offered so far."""

    since: dict[str, float] = field(default_factory=dict)  # endpoint → serving since
    slow_start_s: float = 0.0
    # one tuple per subset of candidates, so the picker recognises a subset it saw before and
    # keeps adding the work it sent since (``ai_aware``'s snapshot)
    subsets: dict[tuple[bool, ...], tuple[EndpointLoad, ...]] = field(default_factory=dict)
    base: tuple[EndpointLoad, ...] = ()  # the candidates the subsets were taken from

    @classmethod
    def of(
        cls,
        loads: Sequence[EndpointLoad],
        record: Mapping[str, Any],
        now: float,
        slow_start_s: float,
    ) -> Ramps:
        """Return the endpoints of ``loads`` still in their slow start at ``now``."""
        since: dict[str, float] = {}
        for load in loads:
            doc = record.get(load.endpoint.name)
            healthy = bool(doc.get("healthy")) if isinstance(doc, dict) else None
            at = doc.get("since") if isinstance(doc, dict) else None
            start = serving_since(
                healthy, float(at) if isinstance(at, int | float) else None, load.healthy, now
            )
            if start is not None and now - start < slow_start_s:
                since[load.endpoint.name] = start
        return cls(since, slow_start_s)

    def share(self, endpoint: str, now: float) -> float:
        """Return the share (floor..1) of its traffic ``endpoint`` may take now."""
        start = self.since.get(endpoint)
        return 1.0 if start is None else ramp(now - start, self.slow_start_s, DEFAULT_FLOOR)

    def offer(self, loads: tuple[EndpointLoad, ...], now: float) -> tuple[EndpointLoad, ...]:
        """Return the candidates for one decision: ramping endpoints by their share's draw."""
        if not self.since:
            return loads
        full: list[int] = []
        ramping: list[tuple[float, int]] = []
        for i, load in enumerate(loads):
            share = self.share(load.endpoint.name, now)
            if share < 1.0:
                ramping.append((share, i))
            else:
                full.append(i)
        if not ramping:
            return loads
        if loads is not self.base:
            self.subsets, self.base = {}, loads
        chosen = set(offered(full, ramping, random.random))
        key = tuple(i in chosen for i in range(len(loads)))
        found = self.subsets.get(key)
        if found is None:
            found = self.subsets[key] = tuple(load for i, load in enumerate(loads) if key[i])
        return found
