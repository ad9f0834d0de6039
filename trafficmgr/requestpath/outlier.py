"""Outlier detection and slow start, after Envoy's: the data plane's own health evidence.

Heartbeats say an endpoint is up; the requests say whether it serves. An endpoint whose
requests fail ``consecutive`` times in a row (5xx, connect errors, no first byte in time,
streams that stall or break) is ejected: no new request for ``base`` seconds times the number
of times it has been ejected (capped at ``longest``), so a flapping endpoint stays out longer
each time. At most ``max_share`` of a pool is ejected at once (and always at least one
endpoint may be), so a fault that hits every endpoint (a bad model push, the gateway's own
network) cannot empty it. The pool is every endpoint the process routes to (its region's,
for a regional gateway): a whole region failing may be ejected while the rest serve. When
the time is up the endpoint is half-open: one request at a time probes it; a probe's first
byte brings it back, a failed probe ejects it again for longer. A client error (4xx),
upstream back-pressure (429) or a client going away says nothing about the endpoint and
changes nothing; any response from the endpoint resets its count of consecutive failures.

Slow start: an endpoint that joins the fleet, returns from ejection or becomes eligible again
(healthy, active, weight above 0) ramps from ``floor`` to full share over ``slow_start_s``:
each pick offers it to the picker with that probability (Envoy's linear ramp, aggression 1).
The ramp and the draw are the engine's (``routing.slowstart``), which ``/route`` applies too.

Shared with the other processes (``requestpath.shared``): an ejection another process made is
adopted here until the same moment (``adopt``), a half-open endpoint another process is
probing is not probed here too, an adopted ejection the others no longer report ends
(``release_adopted``, then slow start), and a ramp that began later elsewhere restarts here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trafficmgr.routing import slowstart


class _Endpoint:
    __slots__ = (
        "adopted",
        "ejected_until",
        "ejections",
        "failures",
        "last_failure",
        "peer_probing",
        "probing",
        "since",
    )

    def __init__(self) -> None:
        self.failures = 0
        self.ejections = 0
        self.ejected_until = 0.0  # > 0: ejected, or half-open once past
        self.probing = False  # a half-open probe is in flight
        self.last_failure = -math.inf
        self.since = -math.inf  # when it last became eligible (slow start)
        self.adopted = False  # the ejection is another process's (shared state)
        self.peer_probing = False  # another process is probing it half-open


@dataclass(frozen=True, slots=True)
class EjectionPolicy:
    consecutive: int = 5
    base_s: float = 10.0
    longest_s: float = 300.0
    max_share: float = 0.5


class OutlierDetector:
    """Per-endpoint failure counts, ejections, half-open probes and slow-start clocks.

    ``now`` is a monotonic clock reading, passed in by the caller.
    """

    def __init__(self, policy: EjectionPolicy) -> None:
        self.policy = policy
        self._state: dict[str, _Endpoint] = {}
        self._pools: Mapping[str, tuple[str, ...]] = {}  # endpoint → its pool's endpoints
        self.ejections_total = 0

    def set_pools(self, pools: Mapping[str, tuple[str, ...]]) -> None:
        """Tell which endpoints share a pool, for the ejected-share bound."""
        self._pools = pools

    def _get(self, name: str) -> _Endpoint:
        state = self._state.get(name)
        if state is None:
            state = self._state[name] = _Endpoint()
        return state

    def available(self, name: str, now: float) -> bool:
        """Tell whether a new request may go to the endpoint now."""
        state = self._state.get(name)
        if state is None or state.ejected_until <= 0.0:
            return True
        return now >= state.ejected_until and not state.probing and not state.peer_probing

    def ejected(self, name: str, now: float) -> bool:
        """Tell whether the endpoint is ejected (not yet half-open)."""
        state = self._state.get(name)
        return state is not None and now < state.ejected_until

    def half_open(self, name: str, now: float) -> bool:
        state = self._state.get(name)
        return state is not None and 0.0 < state.ejected_until <= now

    def sent(self, name: str, now: float) -> bool:
        """Note a request sent to the endpoint; return True when it is a half-open probe."""
        state = self._state.get(name)
        if state is None or state.ejected_until <= 0.0 or now < state.ejected_until:
            return False
        state.probing = True
        return True

    def succeeded(self, name: str, now: float) -> None:
        """The endpoint answered: reset its failures; a probe brings it back (slow start)."""
        state = self._state.get(name)
        if state is None:
            return
        state.failures = 0
        if state.ejected_until > 0.0 and now >= state.ejected_until:
            state.ejected_until, state.probing, state.since = 0.0, False, now
            state.adopted = False
        if now - state.last_failure > self.policy.longest_s:
            state.ejections = 0  # healthy for a long while: the next ejection starts short

    def released(self, name: str, probe: bool) -> None:
        """A request ended saying nothing about the endpoint; a probe may be sent again."""
        state = self._state.get(name)
        if state is not None and probe:
            state.probing = False

    def failed(self, name: str, now: float) -> bool:
        """Count a failure; return True when it ejected the endpoint."""
        state = self._get(name)
        state.last_failure = now
        if state.ejected_until > 0.0 and now >= state.ejected_until:  # a failed probe
            return self._eject(state, now)
        if state.ejected_until > now:
            return False
        state.failures += 1
        if state.failures < self.policy.consecutive or not self._may_eject(name, now):
            return False
        return self._eject(state, now)

    def _eject(self, state: _Endpoint, now: float) -> bool:
        state.ejections += 1
        state.failures, state.probing = 0, False
        state.ejected_until = now + min(self.policy.longest_s, self.policy.base_s * state.ejections)
        self.ejections_total += 1
        return True

    def _may_eject(self, name: str, now: float) -> bool:
        pool = self._pools.get(name, (name,))
        out = sum(1 for n in pool if n != name and self.ejected(n, now))
        allowed = max(1, math.floor(len(pool) * self.policy.max_share))
        return out < allowed

    def joined(self, name: str, now: float) -> None:
        """Start the endpoint's slow start (it joined, or became eligible again)."""
        self._get(name).since = now

    def ramp(self, name: str, now: float, slow_start_s: float, floor: float) -> float:
        """Return the share (floor..1) of its traffic the endpoint may take now."""
        state = self._state.get(name)
        if state is None:
            return 1.0
        return slowstart.ramp(now - state.since, slow_start_s, floor)

    def adopt(self, name: str, until: float, probing: bool, now: float) -> None:
        """Take another process's ejection of ``name`` (until ``until``, this clock)."""
        state = self._get(name)
        state.peer_probing = probing
        if until <= now:
            return  # half-open there: this process's own state decides
        if state.ejected_until <= 0.0 or state.adopted:
            state.adopted = True
            state.ejected_until = until
        elif until > state.ejected_until:
            state.ejected_until = until

    def release_adopted(self, reported: set[str], now: float) -> None:
        """End the adopted ejections and peer probes the others no longer report."""
        for name, state in self._state.items():
            if name in reported:
                continue
            state.peer_probing = False
            if state.adopted:
                state.adopted, state.ejected_until, state.probing = False, 0.0, False
                state.since = now

    def own_ejections(self) -> dict[str, tuple[float, bool]]:
        """Return this process's own ejections: endpoint → (until, a probe in flight)."""
        return {
            n: (s.ejected_until, s.probing)
            for n, s in self._state.items()
            if s.ejected_until > 0.0 and not s.adopted
        }

    def ramp_from(self, name: str, since: float) -> None:
        """Restart the endpoint's slow start at ``since`` when it began later than here."""
        state = self._get(name)
        if since > state.since:
            state.since = since

    def ramps(self, now: float, slow_start_s: float) -> dict[str, float]:
        """Return the endpoints in their slow start here: endpoint → when it began."""
        return {n: s.since for n, s in self._state.items() if 0.0 <= now - s.since < slow_start_s}

    def ejected_names(self) -> list[str]:
        """Return the endpoints ejected or half-open."""
        return sorted(n for n, s in self._state.items() if s.ejected_until > 0.0)

    def forget(self, keep: set[str]) -> None:
        """Drop the state of endpoints no longer in the fleet."""
        for name in [n for n in self._state if n not in keep]:
            del self._state[name]
