"""How much of a list's traffic each failover tier keeps, and how much it passes on.

A tier is a group of regions of one priority within ``FAR_MS`` of each other (weighting.py);
the first tier of a list takes the traffic, the next only what earlier tiers pass on.

*Demand.* A region's demand is what is asked of it over what it can do now
(``RegionStatus.demand``: busy share plus waiting queue per slot, above 1 when overloaded);
a tier's is its regions' demands weighted by their capacity for the model.

*Goal.* A tier is filled to ``1 - spillover_headroom`` of its capacity before it spills; when
the tiers after it are busier than that together, to their demand instead, so that when
everything is short the overload is shared rather than the first tier keeping headroom idle.

*Proportional spill.* The demand was measured under the previous table's weights, so a tier
whose demand is off its goal by a factor keeps that factor more or less of what it kept:
``kept = previous kept x goal / demand`` (the share of its demand its capacity cannot serve
moves on), but at least ``1 - MAX_SPILL``, so the feedback never dies out. A tier that only
receives spillover and is above its goal passes all of it on: the traffic it was sent was
meant for spare capacity it does not have (its own first-tier traffic keeps its demand
measured). Without a previous table (the first compile), or when weight had to leave a region
that stopped being eligible (flows change abruptly), the previous kept share is taken as 1.

*Damping.* Resolvers cache answers for the TTL, so a change shows in the demand only about
``ttl / 2 + heartbeat interval`` later. Kept shares therefore move towards their goal as an
exponential average: with time constant ``SPILL_FACTOR`` delays when passing more on,
``RESTORE_FACTOR`` delays when taking traffic back (overloading a tier costs far more than
idling one; but at the fast rate when the tiers it spills to are above target themselves),
and not at all while within ``SPILL_DEADBAND`` of it (a resolver or two of noise). Slow
start caps a kept share too: a recovering tier keeps at most its ramped share.
``max_shift_per_tick`` (table.py) still limits the whole list's move afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from trafficmgr.routing.types import Fleet

MAX_SPILL = 0.9  # a first tier always keeps a tenth of its traffic
MAX_SPILLOVER_HEADROOM = 0.95
# Time constants, in feedback delays: a delayed integrator is stable below ~1.57 delays per
# time constant and does not overshoot above e; pass on fast, take back without overshoot.
SPILL_FACTOR = 1.0
RESTORE_FACTOR = 3.0
SPILL_DEADBAND = 0.02
FORCED_RESET = 0.01  # previous weight on regions no longer eligible that resets the shares


class Damping(NamedTuple):
    """How far (0..1) kept shares move towards their goals in one compile."""

    spill: float  # when a tier must pass more on
    restore: float  # when it may take traffic back


NO_DAMPING = Damping(1.0, 1.0)


def spill_damping(fleet: Fleet, previous_at: float | None, now: float) -> Damping:
    """Return how far kept shares move in this compile.

    ``1 - exp(-dt / tau)`` for the ``dt`` since the previous table, at most ``tau`` (a table
    left unchanged for long does not let one measurement jump all the way). No previous
    table: no damping.
    """
    if previous_at is None:
        return NO_DAMPING
    lag = max(0.0, fleet.ttl) / 2 + max(0.0, fleet.failover.heartbeat_interval_s)
    dt = max(0.0, now - previous_at)
    return Damping(_smoothing(dt, SPILL_FACTOR * lag), _smoothing(dt, RESTORE_FACTOR * lag))


def _smoothing(dt: float, tau: float) -> float:
    return 1.0 - math.exp(-min(dt, tau) / tau) if tau > 0 else 1.0


@dataclass(frozen=True, slots=True)
class Spill:
    """What one list's tiers need to decide how much to keep."""

    target: float  # demand a tier is filled to before it spills: 1 - spillover_headroom
    previous: Mapping[str, float]  # the previous table's weights on this list's carriers
    damping: Damping


def list_spill(
    spillover_headroom: float, previous: Mapping[str, float], forced: float, damping: Damping
) -> Spill:
    """Return the spill state of one list; ``forced``: previous weight on ineligible regions."""
    target = 1.0 - min(MAX_SPILLOVER_HEADROOM, max(0.0, spillover_headroom))
    if forced > FORCED_RESET or not previous:
        return Spill(target, {}, NO_DAMPING)
    return Spill(target, previous, damping)


def rest_demands(tiers: Sequence[Sequence[tuple[float, float]]]) -> list[float]:
    """Return, per tier, the demand of it and every later tier together.

    Each tier is given as (capacity, demand) pairs of its regions.
    """
    out = [0.0] * len(tiers)
    capacity = demanded = 0.0
    for k in range(len(tiers) - 1, -1, -1):
        for cap, demand in tiers[k]:
            capacity += cap
            demanded += cap * demand
        out[k] = demanded / capacity if capacity > 0 else 0.0
    return out


def kept_share(
    demand: float,
    goal: float,
    previous: float | None,
    damping: Damping,
    *,
    spilled_into: bool = False,
    crowded: bool = False,
) -> float:
    """Return the share of the traffic reaching a tier that the tier keeps.

    ``previous``: the share it kept in the previous table (None: unknown); ``spilled_into``:
    the tier only gets what earlier tiers pass on; ``crowded``: the later tiers together are
    above the target (taking traffic back relieves them, so it is not slowed down).
    """
    floor = 1.0 - MAX_SPILL
    if demand > goal and spilled_into:
        start = 1.0 if previous is None else min(1.0, max(0.0, previous))
        wanted = 0.0
    else:
        start = 1.0 if previous is None else min(1.0, max(floor, previous))
        wanted = 1.0 if demand <= 0 else max(floor, min(1.0, start * goal / demand))
    if previous is None:
        return wanted
    if abs(wanted - start) < SPILL_DEADBAND:
        return wanted if wanted in (0.0, 1.0) else start  # reach the ends, hold elsewhere
    relieves = wanted < start or crowded  # this tier, or the later ones, are over target
    alpha = damping.spill if relieves else damping.restore
    return start + alpha * (wanted - start)


def spill_note(names: Sequence[str], demand: float, goal: float, kept: float, ramp: float) -> str:
    """Explain why a tier passed traffic on to the next one."""
    parts = []
    if kept < 1.0:
        parts.append(f"demand {demand:.0%} of capacity, target {goal:.0%}: keeps {kept:.0%}")
    if ramp < 1.0:
        parts.append(f"slow start {ramp:.0%}")
    shown = ", ".join(names[:3])
    return f"; spillover from {shown} ({', '.join(parts) or 'capacity'})"
