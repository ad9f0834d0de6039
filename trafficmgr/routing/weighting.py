"""Weigh one zone and model: which regions, with what weight, and why.

1. Residency first: only regions the zone's rules allow are candidates, and only those with
   an active endpoint serving the model. Nothing below can add a region residency forbids.
2. A candidate is *eligible* when its state is healthy, degraded, recovering or unknown (no
   evidence yet: it serves by configuration, as ``static_table`` does before the first
   heartbeat), its admin state is active, its weight is positive and it has capacity for
   the model. Down and drained regions get no weight.
3. Eligible regions are put in failover order: by configured priority (lower first), and
   inside one priority by distance, in tiers of regions within ``FAR_MS`` of the tier's
   nearest. The first tier takes the traffic; the next only gets what the tier passes on
   (spillover), and so on; a tier or a priority that is down is skipped (failover).
4. A tier passes on the share of the traffic reaching it that slow start keeps from it, and
   the share of its demand its capacity cannot serve with ``spillover_headroom`` to spare,
   damped from the previous table's shares (``spillover.py``).
5. Inside a tier a region's weight is ``region weight x slow-start ramp x capacity for the
   model x load factor x exp(-(rtt - reference rtt) / PROXIMITY_TAU_MS)`` (at most 1). The
   load factor is ``HEADROOM_FLOOR + headroom``, and ``HEADROOM_FLOOR / demand`` once demand
   passes capacity; the floor keeps a busy region from being emptied and refilled on
   alternate ticks. The reference RTT is the tier's RTTs averaged with weights ``headroom x
   exp(-(rtt - nearest rtt) / PROXIMITY_TAU_MS)``: the nearest region's while it has room,
   sliding continuously to the next ones' as it fills, so that a closer region without room
   does not make the others look far.
6. No eligible region: ``fail_open`` answers the allowed candidates anyway (not drained
   ones), by proximity and weight, and says so; ``fail_closed`` answers nothing.
7. A region answered while an allowed region before it in failover order is out, or an
   earlier tier is full, says so first in plain words (``Passed``): "us-east down; us-west
   full (headroom 2%); nearest with room: eu-west ~103 ms, eu-central ~119 ms; ...".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from math import exp

from trafficmgr.routing.health import config_status
from trafficmgr.routing.residency import ResidencyDecision, apply_availability
from trafficmgr.routing.spillover import (
    NO_DAMPING,
    Damping,
    Spill,
    kept_share,
    list_spill,
    rest_demands,
    spill_note,
)
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
    demand: float  # demanded / live capacity of the region, >= 0
    base: float  # weight x capacity x headroom factor x ramp
    full: float  # the same without the ramp
    index: int  # of its region in the fleet (and in the RTTs)
    priority: int  # of its region
    name: str  # of its region


@dataclass(slots=True)
class ModelCandidates:
    """Every region's standing for one model, computed once per compile."""

    entries: list[Candidate | None]  # per region index; None when not eligible
    configured: list[RegionView]  # regions with an active endpoint serving the model
    serving: frozenset[str]  # names of the eligible regions
    # per residency region set: the allowed regions, and the failover text per first priority
    allowed: dict[frozenset[str] | None, list[RegionView]] = field(default_factory=dict)
    lost: dict[tuple[frozenset[str] | None, int], str] = field(default_factory=dict)


class Weighed:
    """A region's weight in one list before rounding; its reason is written when read.

    Most of a list's regions round to nothing, so their reasons are never needed.
    """

    __slots__ = ("_passed", "_rtt", "_tail", "_tier", "_view", "region", "weight")

    def __init__(
        self,
        view: RegionView,
        weight: float,
        rtt: float | None,
        tail: str | SpillNote,
        passed: Passed | None = None,
        tier: int = 0,
    ) -> None:
        self.region = view.region.name
        self.weight = weight
        self._view = view
        self._rtt = rtt
        self._tail = tail
        self._passed = passed
        self._tier = tier

    @property
    def reason(self) -> str:
        """Return why the region has this weight."""
        v = self._view
        rtt = "" if self._rtt is None else _rtt_text(self._rtt)
        plain = "" if self._passed is None else self._passed.words(v, self._rtt, self._tier)
        return f"{plain}{v.label}{rtt}{v.detail}{self._tail}"


def _rtt_text(rtt: float) -> str:
    """Return the RTT part of a reason (remembered: zones and regions do not move)."""
    text = _RTT_TEXT.get(rtt) if rtt else None  # 0.0 and -0.0 are one key but print apart
    if text is None:
        if len(_RTT_TEXT) >= _RTT_TEXT_LIMIT:
            _RTT_TEXT.clear()
        text = _RTT_TEXT[rtt] = f", rtt ~{rtt:.0f} ms"
    return text


_RTT_TEXT: dict[float, str] = {}
_RTT_TEXT_LIMIT = 65_536


class SpillNote:
    """Why a tier passed traffic on, written only when a reason shows it."""

    __slots__ = ("_args", "_residency", "_text")

    def __init__(
        self, names: list[str], demand: float, goal: float, kept: float, ramp: float, residency: str
    ) -> None:
        self._args = (names, demand, goal, kept, ramp)
        self._residency = residency
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = spill_note(*self._args) + self._residency
        return self._text

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class Passed:
    """The regions a list passes over before an answer, in plain words, written when read.

    Out: allowed regions serving the model by configuration that come before the answer in
    failover order (priority, then RTT) but are not eligible (down, drained, weight 0, no
    capacity). Then the earlier tiers, which passed traffic on (``full``, filled by
    ``_weigh``): full (demand above the spill target), in slow start, or taking traffic back
    (room again, but kept shares return gradually).
    """

    __slots__ = ("_inside", "_model", "_order", "_views", "full", "reached")

    def __init__(
        self, model: ModelCandidates, inside: frozenset[str] | None, order: Sequence[int]
    ) -> None:
        self._model = model
        self._inside = inside
        self._order = order
        self._views: dict[int, RegionView] | None = None
        # per tier that passed traffic on: names, demand, goal, kept share, slow-start ramp
        self.full: list[tuple[list[str], float, float, float, float]] = []
        self.reached: list[list[tuple[str, float | None]]] = []  # per tier: names and RTTs

    def words(self, view: RegionView, rtt: float | None, tier: int) -> str:
        """Return "X down; Y full (headroom 2%); nearest with room: Z ~80 ms; " or ""."""
        parts = self._out(view.index)
        for names, demand, goal, kept, ramp in self.full[:tier]:
            shown = ", ".join(names[:3])
            if ramp < 1.0 and ramp <= kept:
                parts.append(f"{shown} in slow start ({ramp:.0%})")
            elif demand > goal:
                parts.append(f"{shown} full (headroom {max(0.0, 1.0 - demand):.0%})")
            else:  # room again, but spillover moves back gradually (spillover.py)
                parts.append(f"{shown} taking traffic back (keeps {kept:.0%})")
        if not parts:
            return ""
        members = self.reached[tier] if tier < len(self.reached) else [(view.region.name, rtt)]
        shown = ", ".join(n if t is None else f"{n} ~{t:.0f} ms" for n, t in members[:3])
        where = "next with room" if rtt is None else "nearest with room"
        return f"{'; '.join(parts)}; {where}: {shown}; "

    def _out(self, index: int) -> list[str]:
        """Describe the ineligible allowed regions before region ``index`` in failover order."""
        if self._views is None:
            self._views = {v.index: v for v in self._model.configured}
        views, entries, inside = self._views, self._model.entries, self._inside
        out: list[str] = []
        for i in self._order:
            if i == index:
                break
            v = views.get(i)
            if v is None or entries[i] is not None:
                continue
            if inside is None or v.region.name in inside:
                out.append(f"{v.region.name} {_out_word(v)}")
        if len(out) > 3:
            out[3:] = [f"{len(out) - 3} more out"]
        return out


def _out_word(view: RegionView) -> str:
    """Say in a word or two why an allowed region takes no traffic."""
    state = view.status.state
    if state in (RegionState.DOWN, RegionState.DRAINED):
        return state.value
    if view.region.admin_state is not AdminState.ACTIVE:
        return view.region.admin_state.value
    if view.region.weight <= 0:
        return "at weight 0"
    return "without capacity for the model"


Entry = WeightedRegion | Weighed


@dataclass(slots=True)
class ZoneList:
    """One zone/model list before rounding."""

    entries: Sequence[Entry]
    note: str  # why it is empty or fail-open; "" otherwise
    carriers: frozenset[str]  # regions allowed to carry weight (for the shift limit)
    kept: dict[str, float] | None = None  # the previous list's weights on the carriers


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
        demand = _demand(v.status.demand, headroom)
        room = HEADROOM_FLOOR / demand if demand > 1.0 else HEADROOM_FLOOR + headroom
        full = v.region.weight * cap * room
        ramp = max(MIN_RAMP, _unit(v.status.ramp, 1.0))
        region = v.region
        entries.append(
            Candidate(
                v, cap, headroom, demand, full * ramp, full, v.index, region.priority, region.name
            )
        )
    configured = [v for v in views if model in v.configured]
    serving = frozenset(e.view.region.name for e in entries if e is not None)
    return ModelCandidates(entries, configured, serving)


def _unit(value: float, default: float) -> float:
    """Clamp a share to 0..1 (``default`` when it is not a number)."""
    return min(1.0, max(0.0, value)) if value == value else default


def _demand(demand: float | None, headroom: float) -> float:
    """Return a region's demand ratio: as reported, else what its headroom implies."""
    if demand is None or not math.isfinite(demand):
        return 1.0 - headroom
    return max(0.0, demand)


def weigh_list(
    fleet: Fleet,
    decision: ResidencyDecision,
    model: ModelCandidates,
    rtts: tuple[float, ...] | None,
    order: Sequence[int],
    previous: Sequence[WeightedRegion] = (),
    damping: Damping = NO_DAMPING,
) -> ZoneList:
    """Weigh the regions of one zone and model; ``order`` sorts regions by priority, then RTT.

    ``previous`` is the list the previous table published (its kept shares are where the
    spillover goes on from) and ``damping`` how far they move (``spill_damping``).
    """
    if decision.preferred and not decision.spilled:
        down = {n for n in decision.preferred if n not in model.serving}
        decision = apply_availability(decision, down)
    inside = None if decision.regions is None else frozenset(decision.regions)
    allowed = model.allowed.get(inside)
    if allowed is None:
        allowed = model.configured
        if inside is not None:
            allowed = [v for v in allowed if v.region.name in inside]
        model.allowed[inside] = allowed
    if not allowed:
        return ZoneList([], _nobody(decision), frozenset())
    entries = model.entries
    tiers = _LazyTiers(_tiers(order, entries, inside, rtts))
    first = tiers.at(0)
    if first is None:
        return _all_down(fleet, decision, allowed, rtts)
    residency = f"; residency: {decision.reason}" if decision.rules else ""
    priority = first[0].priority
    lost = model.lost.get((inside, priority))
    if lost is None:
        lost = model.lost[(inside, priority)] = _lost(allowed, priority)
    carriers = model.serving if inside is None else model.serving & inside
    kept = {w.region: w.weight for w in previous if w.region in carriers and w.weight > 0}
    forced = sum([w.weight for w in previous]) - sum(kept.values())
    spill = list_spill(fleet.failover.spillover_headroom, kept, forced, damping)
    passed = Passed(model, inside, order)
    weighed = _weigh(tiers, rtts, spill, lost + residency, residency, passed)
    return ZoneList(weighed, "", carriers, kept)


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
    order: Sequence[int],
    entries: Sequence[Candidate | None],
    inside: frozenset[str] | None,
    rtts: tuple[float, ...] | None,
) -> Iterator[list[Candidate]]:
    """Cut eligible regions sorted by (priority, RTT) into tiers: one priority, within FAR_MS."""
    tier: list[Candidate] = []
    priority = 0
    best = 0.0
    for i in order:
        e = entries[i]
        if e is None or (inside is not None and e.name not in inside):
            continue
        rtt = rtts[i] if rtts else 0.0
        if tier and (e.priority != priority or rtt - best > FAR_MS):
            yield tier
            tier = []
        if not tier:
            priority = e.priority
            best = rtt
        tier.append(e)
    if tier:
        yield tier


def _weigh(
    tiers: _LazyTiers,
    rtts: tuple[float, ...] | None,
    spill: Spill,
    first_note: str,
    residency: str,
    passed: Passed | None = None,
) -> list[Entry]:
    """Share one list's traffic over the tiers: the first takes it, later ones get spillover."""
    out: list[Entry] = []
    remaining = 1.0  # share of the list's traffic reaching this tier
    before = sum(spill.previous.values())  # previous weight on this tier and the later ones
    previous_of = spill.previous.get if spill.previous else None
    tail: str | SpillNote = first_note
    k = 0
    tier = tiers.at(0)
    while tier is not None and remaining > 1e-9:
        following = tiers.at(k + 1)
        times, raw, raw_total, full, had, demand = _tier_figures(tier, rtts, previous_of)
        ramp = raw_total / full if full > 0 else 0.0
        take = remaining
        note: str | SpillNote = ""
        if following is not None:
            previous = had / before if before > 1e-9 else None
            goal = spill.target
            if demand > goal or (previous is not None and previous < 1.0):
                goal = max(goal, tiers.demand_from(k + 1))
            kept = kept_share(
                demand,
                goal,
                previous,
                spill.damping,
                spilled_into=k > 0,
                crowded=goal > spill.target,
            )
            take = remaining * min(kept, ramp)
            if remaining - take > 1e-9:  # only a tier that is reached shows the note
                names = [e.name for e in tier]
                note = SpillNote(names, demand, goal, kept, ramp, residency)
                if passed is not None:
                    passed.full.append((names, demand, goal, kept, ramp))
        total = raw_total or 1.0
        if passed is not None:
            passed.reached.append([(e.name, t) for e, t in zip(tier, times, strict=True)])
        for e, r, t in zip(tier, raw, times, strict=True):
            out.append(Weighed(e.view, take * r / total, t, tail, passed, k))
        tail = note
        remaining -= take
        before -= had
        k += 1
        tier = following
    return out


class _LazyTiers:
    """A list's tiers, cut only as far as they are looked at."""

    def __init__(self, tiers: Iterator[list[Candidate]]) -> None:
        self._source = tiers
        self._cut: list[list[Candidate]] = []
        self._rest: list[float] | None = None

    def at(self, k: int) -> list[Candidate] | None:
        """Return tier ``k`` (None past the last)."""
        while len(self._cut) <= k:
            tier = next(self._source, None)
            if tier is None:
                return None
            self._cut.append(tier)
        return self._cut[k]

    def demand_from(self, k: int) -> float:
        """Return the demand of tier ``k`` and every later tier together."""
        if self._rest is None:
            self._cut.extend(self._source)
            self._rest = rest_demands([[(e.capacity, e.demand) for e in t] for t in self._cut])
        return self._rest[k] if k < len(self._rest) else 0.0


def _tier_figures(
    tier: list[Candidate],
    rtts: tuple[float, ...] | None,
    previous_of: Callable[[str, float], float] | None,
) -> tuple[list[float] | list[None], list[float], float, float, float, float]:
    """Return a tier's RTTs, raw weights and their sums, previous weight and demand.

    The sums are of the raw weights and of the same without slow start. A raw weight is the
    region's base weight times its proximity factor against the tier's reference RTT: the
    mean RTT of the tier's regions weighted by ``headroom x proximity to the nearest``, so the
    nearest region's RTT while it has room, moving smoothly towards the next ones as it fills
    (a step would flip weights between ticks), the nearest's when none has room. Regions
    nearer than the reference get 1. The demand is the regions' demands weighted by their
    capacity for the model.
    """
    raw: list[float] = []
    raw_total = full = had = capacity = demanded = 0.0
    times: list[float] | list[None]
    if rtts:
        times = measured = [rtts[e.index] for e in tier]
        nearest = measured[0]
        pulled = moment = 0.0
        for e, t in zip(tier, measured, strict=True):
            pull = e.headroom * exp((nearest - t) / PROXIMITY_TAU_MS)
            pulled += pull
            moment += pull * t
        ref = moment / pulled if pulled > 0 else nearest
        for e, t in zip(tier, measured, strict=True):
            proximity = min(1.0, exp((ref - t) / PROXIMITY_TAU_MS))
            r = e.base * proximity
            raw.append(r)
            raw_total += r
            full += e.full * proximity
    else:
        times = [None] * len(tier)
        for e in tier:
            r = e.base * 1.0
            raw.append(r)
            raw_total += r
            full += e.full * 1.0
    for e in tier:
        if previous_of is not None:
            had += previous_of(e.name, 0.0)
        capacity += e.capacity
        demanded += e.capacity * e.demand
    demand = demanded / capacity if capacity > 0 else 0.0
    return times, raw, raw_total, full, had, demand


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
