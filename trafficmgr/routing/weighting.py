"""Weigh one zone and model: which regions, with what weight, and why.

1. Residency first: only regions the zone's rules allow are candidates, and only those with
   an active endpoint serving the model. Nothing below can add a region residency forbids.
2. A candidate is *eligible* when its state is healthy, degraded, recovering or unknown (no
   evidence yet: it serves by configuration, as ``static_table`` does before the first
   heartbeat), its admin state is active, its weight is positive and it has capacity for
   the model. Down and drained regions get no weight.
3. Eligible regions are put in failover order: by configured priority (lower first), and
   inside one priority by distance, in tiers of regions within ``FAR_MS`` of the tier's
   nearest. The first tier takes the traffic; the next only gets spillover: the share the
   tier cannot accept because of slow start, plus up to ``MAX_SPILL`` as the tier's free
   capacity falls below the policy's ``spillover_headroom``. A tier or a priority that is
   down is skipped (failover).
4. Inside a tier a region's weight is ``region weight x slow-start ramp x capacity for the
   model x (HEADROOM_FLOOR + headroom) x exp(-(rtt - nearest rtt) / PROXIMITY_TAU_MS)``; the
   floor keeps a busy region from being emptied and refilled on alternate ticks.
5. No eligible region: ``fail_open`` answers the allowed candidates anyway (not drained
   ones), by proximity and weight, and says so; ``fail_closed`` answers nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

from trafficmgr.routing.health import config_status
from trafficmgr.routing.residency import ResidencyDecision, apply_availability
from trafficmgr.routing.types import (
    AdminState,
    AllDown,
    Fleet,
    Region,
    RegionState,
    RegionStatus,
    WeightedRegion,
)

PROXIMITY_TAU_MS = 15.0
FAR_MS = 50.0
HEADROOM_FLOOR = 0.1
MAX_SPILL = 0.5
MIN_RAMP = 0.01
_SERVING = frozenset(
    {RegionState.HEALTHY, RegionState.DEGRADED, RegionState.RECOVERING, RegionState.UNKNOWN}
)


@dataclass(slots=True)
class RegionView:
    """One region as this compile sees it."""

    index: int
    region: Region
    status: RegionStatus
    eligible: bool
    answerable: bool  # may be answered fail-open
    capacity: dict[str, float]  # per model, live
    configured: frozenset[str]  # models it serves by configuration
    label: str  # first part of its reasons ("healthy, priority 1")
    detail: str  # last part of its reasons (", headroom 40%, slow start 20%")


@dataclass(slots=True)
class Candidate:
    """An eligible region for one model."""

    view: RegionView
    capacity: float
    headroom: float  # 0..1
    base: float  # weight x capacity x headroom factor x ramp
    full: float  # the same without the ramp


@dataclass(slots=True)
class ModelCandidates:
    """Every region's standing for one model, computed once per compile."""

    entries: list[Candidate | None]  # per region index; None when not eligible
    configured: list[RegionView]  # regions with an active endpoint serving the model
    serving: frozenset[str]  # names of the eligible regions


@dataclass(slots=True)
class ZoneList:
    """One zone/model list before rounding."""

    entries: list[WeightedRegion]
    note: str  # why it is empty or fail-open; "" otherwise
    carriers: frozenset[str]  # regions allowed to carry weight (for the shift limit)


def region_view(
    index: int, region: Region, status: RegionStatus | None, fleet: Fleet
) -> RegionView:
    """Gather what a compile needs to know about one region."""
    configured = config_status(region, fleet.gpu_profiles)
    if status is None:
        status = configured
    active = region.admin_state is AdminState.ACTIVE and status.state is not RegionState.DRAINED
    eligible = active and status.state in _SERVING and region.weight > 0
    if status.models:
        capacity = dict(status.models)
    else:
        share = min(1.0, status.capacity / configured.capacity) if configured.capacity else 0.0
        capacity = {m: c * share for m, c in configured.models.items()}
    label = f"{status.state.value}, priority {region.priority}"
    detail = f", headroom {status.headroom:.0%}"
    if status.ramp < 1.0:
        detail += f", slow start {status.ramp:.0%}"
    if region.weight != 1.0:
        detail += f", weight {region.weight:g}"
    if status.state is RegionState.UNKNOWN:
        detail += ", no evidence yet: by configuration"
    answerable = active and region.weight > 0
    models = frozenset(configured.models)
    return RegionView(index, region, status, eligible, answerable, capacity, models, label, detail)


def model_candidates(views: Sequence[RegionView], model: str) -> ModelCandidates:
    """Return every region's standing for ``model``."""
    entries: list[Candidate | None] = []
    for v in views:
        cap = v.capacity.get(model, 0.0)
        if not v.eligible or not cap > 0 or not math.isfinite(cap) or model not in v.configured:
            entries.append(None)
            continue
        headroom = _unit(v.status.headroom, 0.0)
        full = v.region.weight * cap * (HEADROOM_FLOOR + headroom)
        ramp = max(MIN_RAMP, _unit(v.status.ramp, 1.0))
        entries.append(Candidate(v, cap, headroom, full * ramp, full))
    configured = [v for v in views if model in v.configured]
    serving = frozenset(e.view.region.name for e in entries if e is not None)
    return ModelCandidates(entries, configured, serving)


def _unit(value: float, default: float) -> float:
    """Clamp a share to 0..1 (``default`` when it is not a number)."""
    return min(1.0, max(0.0, value)) if value == value else default


def weigh_list(
    fleet: Fleet,
    decision: ResidencyDecision,
    model: ModelCandidates,
    rtts: tuple[float, ...] | None,
    order: Sequence[int],
) -> ZoneList:
    """Weigh the regions of one zone and model; ``order`` sorts regions by priority, then RTT."""
    if decision.preferred and not decision.spilled:
        down = {n for n in decision.preferred if n not in model.serving}
        decision = apply_availability(decision, down)
    inside = None if decision.regions is None else frozenset(decision.regions)
    allowed = model.configured
    if inside is not None:
        allowed = [v for v in allowed if v.region.name in inside]
    if not allowed:
        return ZoneList([], _nobody(decision), frozenset())
    entries = model.entries
    eligible = (
        e
        for i in order
        if (e := entries[i]) is not None and (inside is None or e.view.region.name in inside)
    )
    first = next(eligible, None)
    if first is None:
        return _all_down(fleet, decision, allowed, rtts)
    residency = f"; residency: {decision.reason}" if decision.rules else ""
    lost = _lost(allowed, first.view.region.priority)
    spillover = fleet.failover.spillover_headroom
    weighed = _weigh(chain((first,), eligible), rtts, spillover, lost, residency)
    carriers = model.serving if inside is None else model.serving & inside
    return ZoneList(weighed, "", carriers)


def _nobody(decision: ResidencyDecision) -> str:
    """Explain a list no region may serve at all."""
    if decision.regions is not None and not decision.regions:
        return f"residency allows no region: {decision.reason}"
    if decision.rules:
        return f"no allowed region serves the model; residency: {decision.reason}"
    return "no region serves the model"


def _lost(allowed: Sequence[RegionView], first: int) -> str:
    """Describe better-priority regions that are out, so the answer says it failed over."""
    out = sorted((v for v in allowed if v.region.priority < first), key=_by_priority)
    if not out:
        return ""
    names = ", ".join(f"{v.region.name} {v.status.state.value}" for v in out[:3])
    more = f" and {len(out) - 3} more" if len(out) > 3 else ""
    return f"; failover: priority {out[0].region.priority} out ({names}{more})"


def _by_priority(view: RegionView) -> tuple[int, int]:
    return view.region.priority, view.index


def _tiers(
    eligible: Iterator[Candidate], rtts: tuple[float, ...] | None
) -> Iterator[list[Candidate]]:
    """Cut regions sorted by (priority, RTT) into tiers: one priority, within FAR_MS."""
    tier: list[Candidate] = []
    best = 0.0
    for e in eligible:
        rtt = rtts[e.view.index] if rtts else 0.0
        if tier and (e.view.region.priority != tier[0].view.region.priority or rtt - best > FAR_MS):
            yield tier
            tier = []
        if not tier:
            best = rtt
        tier.append(e)
    if tier:
        yield tier


def _weigh(
    eligible: Iterator[Candidate],
    rtts: tuple[float, ...] | None,
    spillover: float,
    lost: str,
    residency: str,
) -> list[WeightedRegion]:
    """Share one list's traffic over the tiers: the first takes it, later ones get spillover."""
    out: list[WeightedRegion] = []
    remaining = 1.0
    note = lost
    tiers = _tiers(eligible, rtts)
    tier = next(tiers, None)
    while tier is not None and remaining > 1e-9:
        following = next(tiers, None)
        best = rtts[tier[0].view.index] if rtts else 0.0
        prox = [
            math.exp((best - rtts[e.view.index]) / PROXIMITY_TAU_MS) if rtts else 1.0 for e in tier
        ]
        raw = [e.base * p for e, p in zip(tier, prox, strict=True)]
        full = sum(e.full * p for e, p in zip(tier, prox, strict=True))
        capacity = sum(e.capacity for e in tier)
        headroom = sum(e.capacity * e.headroom for e in tier) / capacity
        acceptance = sum(raw) / full if full > 0 else 0.0
        short = 1.0 - headroom / spillover if spillover > 0 else 0.0
        spill = MAX_SPILL * min(1.0, max(0.0, short))
        take = remaining if following is None else remaining * acceptance * (1.0 - spill)
        total = sum(raw) or 1.0
        tail = note + residency
        for e, r in zip(tier, raw, strict=True):
            v = e.view
            rtt = f", rtt ~{rtts[v.index]:.0f} ms" if rtts else ""
            reason = f"{v.label}{rtt}{v.detail}{tail}"
            out.append(WeightedRegion(v.region.name, take * r / total, reason))
        remaining -= take
        note = _spill_note(tier, headroom, spillover, spill, acceptance)
        tier = following
    return out


def _spill_note(
    tier: Sequence[Candidate], headroom: float, spillover: float, spill: float, acceptance: float
) -> str:
    """Explain why a tier passed traffic on to the next one."""
    names = ", ".join(e.view.region.name for e in tier[:3])
    parts = []
    if spill > 0:
        parts.append(f"headroom {headroom:.0%} < {spillover:.0%}")
    if acceptance < 1.0:
        parts.append(f"slow start {acceptance:.0%}")
    return f"; spillover from {names} ({', '.join(parts) or 'capacity'})"


def _all_down(
    fleet: Fleet,
    decision: ResidencyDecision,
    allowed: Sequence[RegionView],
    rtts: tuple[float, ...] | None,
) -> ZoneList:
    """Answer a list whose allowed regions are all down, per the all-down policy."""
    names = ", ".join(f"{v.region.name} {v.status.state.value}" for v in allowed[:4])
    residency = f"; residency: {decision.reason}" if decision.rules else ""
    if fleet.failover.all_down is AllDown.FAIL_CLOSED:
        note = f"fail_closed: all allowed regions down ({names}){residency}"
        return ZoneList([], note, frozenset())
    answerable = [v for v in allowed if v.answerable]
    if not answerable:
        note = f"all allowed regions down or drained ({names}){residency}"
        return ZoneList([], note, frozenset())
    best = min(rtts[v.index] for v in answerable) if rtts else 0.0
    note = f"fail_open: all allowed regions down ({names}), answering them anyway"
    out = []
    for v in answerable:
        rtt = rtts[v.index] if rtts else best
        weight = v.region.weight * math.exp(-(rtt - best) / PROXIMITY_TAU_MS)
        where = f", rtt ~{rtt:.0f} ms" if rtts else ""
        reason = f"{note}; {v.status.state.value}, priority {v.region.priority}{where}{residency}"
        out.append(WeightedRegion(v.region.name, weight, reason))
    return ZoneList(out, note + residency, frozenset(v.region.name for v in answerable))
