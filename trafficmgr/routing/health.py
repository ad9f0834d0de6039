"""Endpoint and region health from heartbeats: what may take traffic, and how much.

An endpoint is unhealthy when its last heartbeat is older than ``heartbeat_interval_s x
miss_threshold`` (one missed heartbeat never takes it out), its probe of the model failed, a
GPU reports XID or uncorrectable ECC errors (the agent reports errors seen since its previous
heartbeat; one failed GPU breaks a tensor-parallel replica, so the whole endpoint goes), or
its server reports none of the endpoint's models loaded. Its score drops when GPUs throttle for
heat or power (which also lowers its capacity) or when its KV cache or queue is saturated.

Capacity is in decode tokens/s: ``decode_tokens_per_s x gpus x throttling``. Saturation
lowers the score and says so, but not the capacity: a saturated endpoint is not slower, it is
asked for more than it can do, and that is what *demand* measures. An endpoint's demand is
its busy share (the largest of KV cache use, running requests per slot and GPU busy time)
plus its waiting queue per slot (``max_concurrency x gpus``): the work asked for beyond what
it can run at once. It is not clipped at 1, so an overloaded endpoint says by how much;
``load`` is the same figure clipped to 0..1.

*Strain* says whether an endpoint keeps its promise: the larger of its TTFT p99 over the
objective of the models it serves (``Fleet.slo``; the most lenient of them, since the server
reports one figure for all) and its waiting queue over ``QUEUE_SATURATED`` of its slots. At 1
or more the endpoint is *degraded*: it still serves, but it has no room left, whatever its
busy share says (its demand, the work asked of it, is unchanged). KV cache use alone does not
degrade: a full cache is what a well-batched server looks like; the queue and TTFT tell when
it is too full.

A region's capacity is the sum over its healthy endpoints; endpoints that have never reported
are left out of its capacity, score and demand until they do. Its demand is the
capacity-weighted mean of its endpoints' demands (demanded / available decode tokens/s, above
1 when overloaded) and its headroom ``1 - demand`` clipped to 0..1, counting a degraded
endpoint's demand as at least 1: its capacity has no room. Its strain is the
capacity-weighted median of its endpoints' strains (the strain at least half its capacity is
at): 1 or more makes it degraded. The failover state machine leaves degraded only once the
strain is back under ``CALM_BELOW`` (``failover.py``), so a region hovering at its objective
does not flap. ``EndpointHealth.state`` is one tick's verdict; the state an endpoint is shown
in keeps the same band and a hold-down (``endpoint_state.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from trafficmgr.routing.types import (
    DEFAULT_TTFT_P99_MS,
    AdminState,
    Endpoint,
    FailoverPolicy,
    GpuProfile,
    GpuSample,
    Heartbeat,
    Region,
    RegionState,
    RegionStatus,
    ServerSample,
)

THROTTLE_PENALTY = 0.4  # score lost when every GPU throttles for heat or power
HOT_C = 90.0  # a GPU this hot counts as thermally throttled even without a reason
KV_SATURATED = 0.95
QUEUE_SATURATED = 0.25  # waiting requests per unit of max concurrency
SATURATION_PENALTY = 0.4
DEGRADED_BELOW = 0.75  # a region serving less than this share of its capacity is degraded
STRAINED = 1.0  # strain at which an endpoint, or a region's median, is degraded
CALM_BELOW = 0.8  # strain a degraded region must fall under to be healthy again (hysteresis)

_BENIGN_THROTTLES = ("idle", "applicationsclock", "syncboost", "displayclock", "none")
_SLOWING: dict[str, bool] = {}  # throttle reason -> slows for heat or power
_SLOWING_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    endpoint: str
    region: str
    healthy: bool  # may take traffic
    score: float  # 0..1, 1 = fully healthy (GPU throttling, KV saturation lower it)
    capacity: float  # decode tokens/s it can add now (0 when unhealthy or drained)
    load: float  # 0..1 utilisation estimate from the heartbeat
    reason: str
    evidence: bool  # False before the first heartbeat (startup state)
    models: tuple[str, ...] = ()  # models it can serve now
    nominal: float = 0.0  # capacity when fully healthy
    demand: float = 0.0  # busy share + queue per slot; above 1 when overloaded
    strain: float = 0.0  # TTFT p99 / objective or queue / its limit, the larger; >= 1 degraded

    @property
    def state(self) -> str:
        """Return unknown, down, degraded or healthy: this tick's verdict (what an operator is
        shown holds it by the band and hold-down of ``endpoint_state.step_endpoint``)."""
        if not self.evidence:
            return "unknown"
        if not self.healthy:
            return "down"
        return "degraded" if self.strain >= STRAINED else "healthy"


class Observation(StrEnum):
    """What one evaluation saw of a region, the failover state machine's input."""

    NONE = "none"  # no evidence yet
    GOOD = "good"
    DEGRADED = "degraded"
    BAD = "bad"
    DRAINED = "drained"  # region or all its endpoints drained/disabled by an operator


@dataclass(frozen=True, slots=True)
class RegionHealth:
    region: str
    observation: Observation
    capacity: float  # live decode tokens/s
    nominal: float  # configured decode tokens/s of its active endpoints
    headroom: float  # 0..1, free share of the live capacity
    score: float  # live capacity / capacity of the endpoints that reported
    reason: str
    models: Mapping[str, float] = field(default_factory=dict)  # live capacity per model
    demand: float = 0.0  # demanded / live capacity; above 1 when overloaded
    strain: float = 0.0  # capacity-weighted median of its serving endpoints' strains


def nominal_capacity(endpoint: Endpoint, profile: GpuProfile | None) -> float:
    """Return an endpoint's decode tokens/s when fully healthy."""
    return profile.decode_tokens_per_s * endpoint.gpus if profile else 0.0


def endpoint_health(
    endpoint: Endpoint,
    heartbeat: Heartbeat | None,
    profile: GpuProfile,
    policy: FailoverPolicy,
    now: float,
    objective_ms: float = DEFAULT_TTFT_P99_MS,
) -> EndpointHealth:
    """Judge one endpoint from its latest heartbeat; ``objective_ms``: its TTFT p99 objective."""
    nominal = profile.decode_tokens_per_s * endpoint.gpus if profile else 0.0
    if endpoint.admin_state is not AdminState.ACTIVE:
        reason = f"endpoint {endpoint.admin_state.value}"
        return _down(endpoint, reason, heartbeat is not None, nominal)
    if heartbeat is None:
        return _down(endpoint, "no heartbeat yet", False, nominal)
    failure = _failure(endpoint, heartbeat, policy, now)
    if failure:
        return _down(endpoint, failure, True, nominal)
    models = _models_served(endpoint, heartbeat.server)
    if not models:
        return _down(endpoint, "none of its models loaded", True, nominal)
    throttling, score, notes = _score(heartbeat)
    if len(models) < len(endpoint.models):
        notes.append(f"only {', '.join(models)} loaded")
    demand = endpoint_demand(heartbeat, profile, endpoint.gpus)
    strain, strained = endpoint_strain(heartbeat.server, profile, endpoint.gpus, objective_ms)
    if strained:
        notes.extend(strained)
        if score == throttling:  # not lowered for a full KV cache already
            score *= 1.0 - SATURATION_PENALTY
    return EndpointHealth(
        endpoint.name,
        endpoint.region,
        True,
        score,
        nominal * throttling,
        min(1.0, max(0.0, demand)),
        "; ".join(notes) or "ok",
        True,
        models,
        nominal,
        demand,
        strain,
    )


def endpoint_strain(
    server: ServerSample | None, profile: GpuProfile, gpus: int, objective_ms: float
) -> tuple[float, list[str]]:
    """Return how far an endpoint is from its promise (>= 1: degraded) and, if so, why.

    The larger of TTFT p99 / objective and waiting requests / (``QUEUE_SATURATED`` x slots).
    """
    if server is None:
        return 0.0, []
    ttft = server.ttft_p99_ms
    slow = ttft / objective_ms if objective_ms > 0 and 0 < ttft < math.inf else 0.0
    limit = max(1.0, profile.max_concurrency * gpus * QUEUE_SATURATED)
    waiting = server.requests_waiting
    queued = waiting / limit if waiting > 0 else 0.0
    notes = []
    if slow >= STRAINED:
        notes.append(f"TTFT p99 {ttft / 1000:.1f} s over objective {objective_ms / 1000:g} s")
    if queued >= STRAINED:
        notes.append(f"queue saturated ({waiting} waiting, limit {limit:.0f})")
    return max(slow, queued), notes


def _down(endpoint: Endpoint, reason: str, evidence: bool, nominal: float) -> EndpointHealth:
    """Return the health of an endpoint that may not take traffic."""
    return EndpointHealth(
        endpoint.name, endpoint.region, False, 0.0, 0.0, 0.0, reason, evidence, (), nominal
    )


def _failure(endpoint: Endpoint, hb: Heartbeat, policy: FailoverPolicy, now: float) -> str:
    """Return why the endpoint may not take traffic, or an empty string."""
    age = now - hb.received_at
    limit = policy.heartbeat_interval_s * policy.miss_threshold
    if age > limit:
        return (
            f"heartbeat {age:.1f} s old > {policy.miss_threshold} x "
            f"{policy.heartbeat_interval_s:g} s"
        )
    if hb.probe is not None and not hb.probe.ok:
        return "probe failed"
    for gpu in hb.gpus:
        if gpu.xid_errors > 0:
            return f"xid errors on GPU {gpu.index}"
        if gpu.ecc_errors > 0:
            return f"ecc errors on GPU {gpu.index}"
    return ""


def _models_served(endpoint: Endpoint, server: ServerSample | None) -> tuple[str, ...]:
    """Return the configured models the server has loaded (all when it does not say)."""
    if server is None or not server.models_loaded:
        return endpoint.models
    loaded = server.models_loaded
    if loaded is endpoint.models or loaded == endpoint.models:
        return endpoint.models  # the usual case: exactly its models are loaded
    wanted = set(loaded)
    return tuple(m for m in endpoint.models if m in wanted)


def _score(hb: Heartbeat) -> tuple[float, float, list[str]]:
    """Return the share of its speed throttling leaves, the 0..1 score, and why it is lower."""
    throttling = 1.0
    notes: list[str] = []
    samples = hb.gpus
    throttled = 0
    for g in samples:
        if g.temp_c >= HOT_C or (g.throttle_reasons and _throttled(g)):
            throttled += 1
    if throttled:
        share = throttled / max(len(samples), 1)
        throttling = 1.0 - THROTTLE_PENALTY * share
        notes.append(f"throttled on {throttled}/{len(samples)} GPUs")
    score = throttling
    server = hb.server
    if server is not None and server.kv_cache_usage >= KV_SATURATED:
        score *= 1.0 - SATURATION_PENALTY
        notes.append(f"KV cache {server.kv_cache_usage:.0%} full")
    return throttling, score, notes


def _throttled(gpu: GpuSample) -> bool:
    """Tell whether a GPU is slowed down for heat or power (not idle or by clock settings)."""
    if gpu.temp_c >= HOT_C:
        return True
    for reason in gpu.throttle_reasons:
        slows = _SLOWING.get(reason) if isinstance(reason, str) else None
        if slows is None:
            slows = _slowing(reason)
            if isinstance(reason, str) and len(_SLOWING) < _SLOWING_LIMIT:
                _SLOWING[reason] = slows
        if slows:
            return True
    return False


def _slowing(reason: str) -> bool:
    """Tell whether a throttle reason slows the GPU for heat or power."""
    norm = reason.lower().replace("_", "").replace(" ", "").replace("-", "")
    return bool(norm) and not any(b in norm for b in _BENIGN_THROTTLES)


def endpoint_demand(hb: Heartbeat, profile: GpuProfile, gpus: int) -> float:
    """Return the demand on an endpoint relative to its capacity (above 1 when overloaded).

    Busy share (the largest of KV cache use, running requests per slot and the GPUs' mean busy
    time) plus the waiting queue per slot.
    """
    busy = 0.0
    samples = hb.gpus
    if samples:
        busy = _share(sum([g.util_pct for g in samples]) / (100.0 * len(samples)))
    server = hb.server
    if server is None:
        return busy
    slots = max(1, profile.max_concurrency * gpus)
    requests = server.requests_running
    running = (requests if requests > 0 else 0) / slots
    kv = _share(server.kv_cache_usage)
    if kv > busy:
        busy = kv
    if running > busy:  # running >= 0, so as clipped
        busy = running if running < 1.0 else 1.0
    waiting = server.requests_waiting
    return busy + (waiting if waiting > 0 else 0) / slots


def _share(value: float) -> float:
    """Clip a share to 0..1; 0 when it is not a finite number."""
    if 0.0 < value < math.inf:
        return value if value < 1.0 else 1.0
    return 0.0


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def region_health(region: Region, healths: Sequence[EndpointHealth]) -> RegionHealth:
    """Sum one region's endpoint health into what the failover state machine observes."""
    names = {e.name for e in region.endpoints if e.admin_state is AdminState.ACTIVE}
    active = [h for h in healths if h.endpoint in names]
    nominal = sum(h.nominal for h in active)
    if region.admin_state is not AdminState.ACTIVE:
        return _no_capacity(
            region, Observation.DRAINED, nominal, f"region {region.admin_state.value}"
        )
    if not region.endpoints:
        return _no_capacity(region, Observation.BAD, 0.0, "no endpoints configured")
    if not active:
        return _no_capacity(region, Observation.DRAINED, 0.0, "all endpoints drained")
    reported = [h for h in active if h.evidence]
    if not reported:
        return _no_capacity(region, Observation.NONE, nominal, "no heartbeat yet")
    serving = [h for h in reported if h.healthy]
    capacity = sum(h.capacity for h in serving)
    if capacity <= 0:
        return _no_capacity(region, Observation.BAD, nominal, _summary(reported, len(reported)))
    score = capacity / max(sum(h.nominal for h in reported), 1e-9)
    demand = sum(h.capacity * h.demand for h in serving) / capacity
    models: dict[str, float] = {}
    for h in serving:
        for m in h.models:
            models[m] = models.get(m, 0.0) + h.capacity
    strain = median_strain(serving)
    good = score >= DEGRADED_BELOW and strain < STRAINED
    observation = Observation.GOOD if good else Observation.DEGRADED
    reason = _region_reason(len(active), reported, serving, score, demand, strain)
    pressed = sum(h.capacity * _pressure(h) for h in serving) / capacity
    headroom = _clip(1.0 - pressed)
    return RegionHealth(
        region.name,
        observation,
        capacity,
        nominal,
        headroom,
        min(score, 1.0),
        reason,
        models,
        demand,
        strain,
    )


def _region_reason(
    active: int,
    reported: Sequence[EndpointHealth],
    serving: Sequence[EndpointHealth],
    score: float,
    demand: float,
    strain: float,
) -> str:
    """Describe a serving region: how much serves, what misses its objective, what is wrong."""
    reason = f"{len(serving)}/{active} endpoints serving, {score:.0%} of capacity"
    if strain >= STRAINED:
        capacity = sum(h.capacity for h in serving)
        missing = sum(h.capacity for h in serving if h.strain >= STRAINED) / capacity
        reason = f"{reason}; {missing:.0%} of capacity missing its objective"
    problems = [h for h in reported if not h.healthy or h.reason != "ok"]
    if problems:
        reason = f"{reason}; {_summary(problems, len(problems))}"
    if demand > 1.0:
        reason = f"{reason}; demand {demand:.0%} of capacity"
    return reason


def _pressure(h: EndpointHealth) -> float:
    """Return an endpoint's demand as headroom counts it: at least 1 once it is degraded."""
    return max(h.demand, 1.0) if h.strain >= STRAINED else h.demand


def median_strain(serving: Sequence[EndpointHealth]) -> float:
    """Return the strain at least half the serving capacity is at (capacity-weighted median)."""
    total = sum(h.capacity for h in serving)
    if total <= 0:
        return 0.0
    reached = 0.0
    for h in sorted(serving, key=lambda h: h.strain, reverse=True):
        reached += h.capacity
        if reached >= total / 2:
            return h.strain
    return 0.0


def _no_capacity(region: Region, obs: Observation, nominal: float, reason: str) -> RegionHealth:
    return RegionHealth(region.name, obs, 0.0, nominal, 0.0, 0.0, reason)


def _summary(healths: Sequence[EndpointHealth], count: int, limit: int = 3) -> str:
    """Describe the first few endpoints' problems."""
    parts = [f"{h.endpoint}: {h.reason}" for h in healths[:limit]]
    if count > limit:
        parts.append(f"and {count - limit} more")
    return "; ".join(parts)


def config_capacity(region: Region, profiles: Mapping[str, GpuProfile]) -> dict[str, float]:
    """Return a region's configured decode tokens/s per model over its active endpoints."""
    models: dict[str, float] = {}
    if region.admin_state is not AdminState.ACTIVE:
        return models
    for e in region.endpoints:
        if e.admin_state is AdminState.ACTIVE:
            cap = nominal_capacity(e, profiles.get(e.gpu))
            for m in e.models:
                models[m] = models.get(m, 0.0) + cap
    return models


def config_status(
    region: Region, profiles: Mapping[str, GpuProfile], since: float = 0.0
) -> RegionStatus:
    """Return a region's status from configuration alone, before any heartbeat."""
    if region.admin_state is not AdminState.ACTIVE:
        return RegionStatus(
            RegionState.DRAINED, 0.0, 0.0, f"region {region.admin_state.value}", since
        )
    models, capacity = _configured(region, profiles)
    return RegionStatus(
        RegionState.UNKNOWN,
        1.0 if capacity > 0 else 0.0,
        capacity,
        "no evidence yet: serving by configuration",
        since,
        1.0,
        dict(models),
    )


# id(region) -> (region, profiles as they were, models, capacity); every compile and every
# evaluation asks again about the same frozen regions
_CONFIGURED: dict[int, tuple[Region, dict[str, GpuProfile], dict[str, float], float]] = {}
_CONFIGURED_LIMIT = 4096


def _configured(
    region: Region, profiles: Mapping[str, GpuProfile]
) -> tuple[dict[str, float], float]:
    """Return a region's configured capacity per model and in all (remembered per region)."""
    found = _CONFIGURED.get(id(region))
    if found is not None and found[0] is region and found[1] == profiles:
        return found[2], found[3]
    models = config_capacity(region, profiles)
    capacity = sum(
        nominal_capacity(e, profiles.get(e.gpu))
        for e in region.endpoints
        if e.admin_state is AdminState.ACTIVE
    )
    if len(_CONFIGURED) >= _CONFIGURED_LIMIT:
        _CONFIGURED.clear()
    _CONFIGURED[id(region)] = (region, dict(profiles), models, capacity)
    return models, capacity
