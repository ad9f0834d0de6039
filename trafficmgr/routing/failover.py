"""The per-region failover state machine and the evaluation of a whole fleet per tick.

States: unknown → healthy ↔ degraded → down → recovering → healthy, and drained.

- A new machine starts UNKNOWN: no region is up or down before the first evidence. The
  first serving observation makes it healthy (or degraded) at once; a region that stays
  silent longer than ``heartbeat_interval_s x miss_threshold`` counts as bad.
- Down is immediate once ``down_threshold`` consecutive evaluations are bad (endpoint health
  already tolerates ``miss_threshold`` missed heartbeats). Safety first: going down or being
  drained is never held back.
- Every other change waits ``hold_down_s`` since the previous change, so between two
  changes towards down there is always a held one: alternating inputs cause at most about
  ``2 x (T / hold_down_s + 1) + 1`` changes in T seconds.
- Down → recovering needs ``up_threshold`` consecutive serving evaluations; a recovering
  region ramps its traffic (``RegionStatus.ramp``) from ``MIN_RAMP`` to 1 over
  ``slow_start_s``, then becomes healthy (or degraded).
- Healthy ↔ degraded also has a band: a region degraded because it misses its objective
  (``RegionHealth.strain`` >= 1) stays degraded until its strain is under ``CALM_BELOW``.
- Drained follows the operator's admin state (region drained/disabled, or all endpoints
  drained) immediately; leaving it is a manual act, so it goes straight to recovering
  (slow start) on serving evidence, down on bad evidence, unknown without evidence.
- A paused machine keeps counting evidence but changes state only for drains.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from trafficmgr.routing.health import (
    CALM_BELOW,
    EndpointHealth,
    Observation,
    RegionHealth,
    config_status,
    endpoint_health,
    region_health,
)
from trafficmgr.routing.types import (
    Endpoint,
    FailoverPolicy,
    Fleet,
    GpuProfile,
    Heartbeat,
    RegionState,
    RegionStatus,
)

MIN_RAMP = 0.05
_SERVING = (Observation.GOOD, Observation.DEGRADED)


@dataclass(frozen=True, slots=True)
class RegionMachine:
    """Per-region failover state machine, carried from tick to tick."""

    state: RegionState
    since: float  # when it entered `state`
    good_streak: int = 0  # consecutive serving (good or degraded) evaluations
    bad_streak: int = 0  # consecutive bad evaluations
    paused: bool = False  # operator paused automatic failover
    evidence_at: float | None = None  # last evaluation that had heartbeat evidence


@dataclass(frozen=True, slots=True)
class Transition:
    region: str
    old: RegionState
    new: RegionState
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class FleetEvaluation:
    endpoints: Mapping[str, EndpointHealth]
    machines: Mapping[str, RegionMachine]
    statuses: Mapping[str, RegionStatus]  # what compile_table takes
    transitions: tuple[Transition, ...]
    regions: Mapping[str, RegionHealth] = field(default_factory=dict)


def new_machine(now: float) -> RegionMachine:
    """Return the machine of a region nothing is known about yet."""
    return RegionMachine(RegionState.UNKNOWN, now)


def step_machine(
    region: str,
    machine: RegionMachine,
    health: RegionHealth,
    policy: FailoverPolicy,
    now: float,
) -> tuple[RegionMachine, Transition | None]:
    """Advance one region's machine by one evaluation."""
    obs, why = _resolve(machine, health, policy, now)
    good = machine.good_streak + 1 if obs in _SERVING else 0
    bad = machine.bad_streak + 1 if obs is Observation.BAD else 0
    if obs is Observation.NONE:
        good, bad = machine.good_streak, machine.bad_streak
    evidence_at = machine.evidence_at if health.observation is Observation.NONE else now
    counted = RegionMachine(machine.state, machine.since, good, bad, machine.paused, evidence_at)
    target = _target(counted, obs, policy, now)
    if target is None or target is machine.state:
        return counted, None
    reason = f"{target.value}: {why}"
    if target is RegionState.RECOVERING:
        reason = f"{reason}; slow start over {policy.slow_start_s:g} s"
    moved = RegionMachine(target, now, good, bad, counted.paused, evidence_at)
    return moved, Transition(region, machine.state, target, now, reason)


def _resolve(
    machine: RegionMachine, health: RegionHealth, policy: FailoverPolicy, now: float
) -> tuple[Observation, str]:
    """Turn a lasting absence of evidence into a bad observation; keep degraded in the band."""
    if health.observation is not Observation.NONE:
        if _held_degraded(machine.state, health):
            return Observation.DEGRADED, health.reason
        return health.observation, health.reason
    grace = policy.heartbeat_interval_s * policy.miss_threshold
    last = machine.evidence_at if machine.evidence_at is not None else machine.since
    if now - last > grace:
        return Observation.BAD, f"no heartbeat from any endpoint for {now - last:.1f} s"
    return Observation.NONE, health.reason


def _target(
    m: RegionMachine, obs: Observation, policy: FailoverPolicy, now: float
) -> RegionState | None:
    """Return the state the machine should move to, or None to stay."""
    state = m.state
    if obs is Observation.DRAINED:
        return RegionState.DRAINED
    if state is RegionState.DRAINED:
        return _undrained(obs)
    if m.paused:
        return None
    down_now = obs is Observation.BAD and m.bad_streak >= policy.down_threshold
    if down_now:
        return RegionState.DOWN
    if state is RegionState.UNKNOWN:
        return _serving_state(obs)
    if now - m.since < policy.hold_down_s:
        return None
    if state is RegionState.HEALTHY and obs is Observation.DEGRADED:
        return RegionState.DEGRADED
    if state is RegionState.DEGRADED and obs is Observation.GOOD:
        return RegionState.HEALTHY
    if state is RegionState.DOWN and obs in _SERVING and m.good_streak >= policy.up_threshold:
        return RegionState.RECOVERING
    if state is RegionState.RECOVERING and now - m.since >= policy.slow_start_s:
        return _serving_state(obs)
    return None


def _held_degraded(state: RegionState, health: RegionHealth) -> bool:
    """Tell whether a degraded region looking good is still too near its objective to leave."""
    return (
        state is RegionState.DEGRADED
        and health.observation is Observation.GOOD
        and health.strain >= CALM_BELOW
    )


def _serving_state(obs: Observation) -> RegionState | None:
    if obs is Observation.GOOD:
        return RegionState.HEALTHY
    if obs is Observation.DEGRADED:
        return RegionState.DEGRADED
    return None


def _undrained(obs: Observation) -> RegionState:
    """Return where an undrained region goes."""
    if obs in _SERVING:
        return RegionState.RECOVERING
    if obs is Observation.BAD:
        return RegionState.DOWN
    return RegionState.UNKNOWN


def ramp_of(machine: RegionMachine, policy: FailoverPolicy, now: float) -> float:
    """Return the share 0..1 of its traffic a region may take now (slow start)."""
    if machine.state in (RegionState.DOWN, RegionState.DRAINED):
        return 0.0
    if machine.state is not RegionState.RECOVERING or policy.slow_start_s <= 0:
        return 1.0
    return max(MIN_RAMP, min(1.0, (now - machine.since) / policy.slow_start_s))


def region_status(
    machine: RegionMachine,
    health: RegionHealth,
    configured: RegionStatus,
    policy: FailoverPolicy,
    now: float,
) -> RegionStatus:
    """Return what the table publishes about a region."""
    if machine.state is RegionState.UNKNOWN:
        c = configured
        reason = f"unknown: {c.reason}"
        return RegionStatus(
            c.state, c.headroom, c.capacity, reason, machine.since, c.ramp, c.models, c.demand
        )
    ramp = ramp_of(machine, policy, now)
    reason = f"{machine.state.value}: {health.reason}"
    if _held_degraded(machine.state, health):
        reason = f"{reason}; strain {health.strain:.2f}: healthy again under {CALM_BELOW:g}"
    if machine.state is RegionState.RECOVERING:
        reason = f"{reason}; slow start {ramp:.0%}"
    if machine.paused:
        reason = f"{reason}; failover paused"
    return RegionStatus(
        machine.state,
        health.headroom,
        health.capacity,
        reason,
        machine.since,
        ramp,
        dict(health.models),
        health.demand,
    )


def evaluate_fleet(
    fleet: Fleet,
    heartbeats: Mapping[str, Heartbeat],
    machines: Mapping[str, RegionMachine],
    now: float,
) -> FleetEvaluation:
    """Judge every endpoint and region, advance the machines, and return the statuses."""
    policy = fleet.failover
    endpoints: dict[str, EndpointHealth] = {}
    out_machines: dict[str, RegionMachine] = {}
    statuses: dict[str, RegionStatus] = {}
    regions: dict[str, RegionHealth] = {}
    transitions: list[Transition] = []
    for region in fleet.regions:
        healths = [
            endpoint_health(
                e, heartbeats.get(e.name), _profile(fleet, e.gpu), policy, now, _objective(fleet, e)
            )
            for e in region.endpoints
        ]
        endpoints.update((h.endpoint, h) for h in healths)
        health = region_health(region, healths)
        machine = machines.get(region.name) or new_machine(now)
        machine, transition = step_machine(region.name, machine, health, policy, now)
        if transition is not None:
            transitions.append(transition)
        configured = config_status(region, fleet.gpu_profiles, machine.since)
        out_machines[region.name] = machine
        regions[region.name] = health
        statuses[region.name] = region_status(machine, health, configured, policy, now)
    return FleetEvaluation(endpoints, out_machines, statuses, tuple(transitions), regions)


def _objective(fleet: Fleet, endpoint: Endpoint) -> float:
    """Return an endpoint's TTFT p99 objective: the most lenient of its models' (one figure
    covers them all in its server's report)."""
    slo = fleet.slo
    return max((slo.ttft_ms(m) for m in endpoint.models), default=slo.ttft_p99_ms)


def _profile(fleet: Fleet, gpu: str) -> GpuProfile:
    """Return a GPU type's profile; an unknown type has no capacity."""
    return fleet.gpu_profiles.get(gpu) or GpuProfile(gpu, 0.0, 0.0, 1)


def with_pauses(
    machines: Mapping[str, RegionMachine], paused: frozenset[str], regions: list[str], now: float
) -> dict[str, RegionMachine]:
    """Carry the operator's pause-failover flags into the machines."""
    out = dict(machines)
    for name in regions:
        machine = out.get(name) or new_machine(now)
        if machine.paused != (name in paused):
            machine = replace(machine, paused=name in paused)
        out[name] = machine
    return out
