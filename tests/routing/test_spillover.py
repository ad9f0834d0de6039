"""Spillover from a saturated tier: proportional to the shortfall, damped, inside residency.

The world: DE clients (GDPR) may use eu-west (priority 1) and eu-central (priority 2) only;
US clients have eu-west, then eu-central and ap-south (priority 2, each its own tier).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise

import pytest

from trafficmgr.routing import spillover
from trafficmgr.routing.failover import evaluate_fleet
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.table import (
    compile_table,
    lookup,
    table_from_json,
    table_to_json,
    zone_location,
)
from trafficmgr.routing.types import (
    ClientLocation,
    Fleet,
    Heartbeat,
    RegionState,
    RegionStatus,
    RoutingTable,
    WeightedRegion,
)

S = RegionState
Statuses = Callable[..., dict[str, RegionStatus]]
DE = ClientLocation("DE", "EU")
US = ClientLocation("US", "NA")
M70 = "llama-3-70b"
SPILL_ALPHA = 1 - 2.718281828459045 ** (-1 / 6)  # 1 s after the previous table, lag 10/2 + 1 s


def weights(entries: tuple[WeightedRegion, ...]) -> dict[str, float]:
    return {w.region: w.weight for w in entries}


def loaded(fleet: Fleet, statuses: Statuses, **demands: float) -> dict[str, RegionStatus]:
    """Return healthy statuses with the given demands (``eu_west=1.5``); others at 40%."""
    out = statuses(fleet, S.HEALTHY)
    for key, demand in demands.items():
        name = key.replace("_", "-")
        out[name] = replace(out[name], demand=demand, headroom=max(0.0, 1.0 - demand))
    return out


def de_share(table: RoutingTable, region: str = "eu-west") -> float:
    return weights(lookup(table, DE, M70)).get(region, 0.0)


@pytest.mark.parametrize("demand", [0.0, 0.5, 0.85, 0.9])
def test_an_unsaturated_first_tier_keeps_all_its_traffic(
    gdpr_fleet: Fleet, statuses: Statuses, now: float, demand: float
) -> None:
    table = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=demand), now)
    assert weights(lookup(table, DE, M70)) == {"eu-west": 1.0}


@pytest.mark.parametrize(
    ("demand", "kept"), [(1.0, 0.9), (1.2, 0.75), (1.5, 0.6), (2.0, 0.45), (3.0, 0.3)]
)
def test_a_saturated_first_tier_spills_in_proportion_to_its_shortfall(
    gdpr_fleet: Fleet, statuses: Statuses, now: float, demand: float, kept: float
) -> None:
    table = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=demand), now)
    assert weights(lookup(table, DE, M70)) == pytest.approx(
        {"eu-west": kept, "eu-central": 1 - kept}, abs=1e-4
    )


def test_spillover_headroom_sets_the_target(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    fleet = replace(gdpr_fleet, failover=replace(gdpr_fleet.failover, spillover_headroom=0.0))
    assert de_share(compile_table(fleet, loaded(fleet, statuses, eu_west=0.98), now)) == 1.0
    assert de_share(compile_table(fleet, loaded(fleet, statuses, eu_west=1.25), now)) == 0.8


def test_even_a_huge_overload_keeps_a_tenth_at_the_first_tier(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    table = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=20.0), now)
    assert de_share(table) == pytest.approx(1 - spillover.MAX_SPILL)


def test_when_the_next_tier_is_short_too_the_overload_is_shared(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = loaded(gdpr_fleet, statuses, eu_west=1.5, eu_central=1.2)
    assert de_share(compile_table(gdpr_fleet, given, now)) == pytest.approx(1.2 / 1.5)
    given = loaded(gdpr_fleet, statuses, eu_west=1.5, eu_central=1.5)
    assert de_share(compile_table(gdpr_fleet, given, now)) == 1.0


def test_a_spilled_into_tier_above_its_goal_passes_the_spill_on(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = loaded(gdpr_fleet, statuses, eu_west=1.5, eu_central=1.3, ap_south=0.2)
    entries = weights(lookup(compile_table(gdpr_fleet, given, now), US, M70))
    assert entries["eu-west"] == pytest.approx(0.6)  # later tiers together at 75%: target 90%
    assert "eu-central" not in entries  # overloaded itself: none of the spill stays there
    assert entries["ap-south"] == pytest.approx(0.4)


def test_inside_a_tier_a_closer_region_without_room_does_not_crowd_out_one_with_room(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    regions = tuple(replace(r, priority=1) for r in gdpr_fleet.regions)
    fleet = replace(gdpr_fleet, regions=regions)  # DE: eu-central (7 ms) and eu-west (21 ms)
    calm = weights(lookup(compile_table(fleet, loaded(fleet, statuses), now), DE, M70))
    assert calm["eu-central"] > 1.3 * calm["eu-west"]  # both with room: the nearer leads
    busy = loaded(fleet, statuses, eu_central=1.6, eu_west=0.5)
    entries = weights(lookup(compile_table(fleet, busy, now), DE, M70))
    assert entries["eu-west"] > 5 * entries["eu-central"]


def test_inside_a_tier_weights_move_continuously_as_the_nearer_region_fills(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    regions = tuple(replace(r, priority=1) for r in gdpr_fleet.regions)
    fleet = replace(gdpr_fleet, regions=regions)
    shares = []
    for step in range(101):
        given = loaded(fleet, statuses, eu_central=0.5 + step * 0.01, eu_west=0.5)
        shares.append(weights(lookup(compile_table(fleet, given, now), DE, M70))["eu-central"])
    assert shares == sorted(shares, reverse=True)  # fuller: less weight, never more
    assert max(a - b for a, b in pairwise(shares)) < 0.05  # and no step where it fills up


def test_inside_a_tier_more_overload_means_less_weight(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    regions = tuple(replace(r, priority=1) for r in gdpr_fleet.regions)
    fleet = replace(gdpr_fleet, regions=regions)
    shares = [
        weights(lookup(compile_table(fleet, loaded(fleet, statuses, eu_central=d), now), DE, M70))
        for d in (0.5, 1.0, 1.5, 3.0)
    ]
    central = [s.get("eu-central", 0.0) for s in shares]
    assert central == sorted(central, reverse=True) and central[-1] < central[-2]


def test_strict_residency_bounds_the_spill_whatever_the_overload(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = loaded(gdpr_fleet, statuses, eu_west=5.0, eu_central=5.0, ap_south=0.0)
    table = compile_table(gdpr_fleet, given, now)
    for zone, lists in table.zones.items():
        strict = allowed_regions(gdpr_fleet, zone_location(zone)).strict_regions
        for model, entries in lists.items():
            assert strict is None or {w.region for w in entries} <= set(strict), (zone, model)
    assert weights(lookup(table, DE, M70)) == {"eu-west": 1.0}  # balanced: nowhere better
    assert "ap-south" not in weights(lookup(table, ClientLocation("IE", "EU"), M70))


def test_spill_moves_towards_its_goal_damped(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    before = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=1.5), now)
    assert de_share(before) == 0.6
    # Under those weights the demand is still 1.2: the goal is 0.6 x 0.9 / 1.2 = 0.45.
    after = compile_table(
        gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=1.2), now + 1, previous=before
    )
    assert de_share(after) == pytest.approx(0.6 - SPILL_ALPHA * 0.15, abs=1e-4)


def test_taking_traffic_back_is_slower_than_passing_it_on(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    before = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=1.5), now)
    more = compile_table(
        gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=1.35), now + 1, previous=before
    )
    less = compile_table(
        gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=0.675), now + 1, previous=before
    )
    passed_on = 0.6 - de_share(more)  # goal 0.4
    taken_back = de_share(less) - 0.6  # goal 0.8
    assert 0 < taken_back < passed_on / 2


def test_small_errors_leave_the_shares_alone(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    before = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=1.5), now)
    for demand in (0.89, 0.9, 0.91):
        after = compile_table(
            gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=demand), now + 1, previous=before
        )
        assert de_share(after) == 0.6


def test_a_tier_back_under_target_stops_spilling_entirely(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    table = compile_table(gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=0.92), now)
    assert 0.97 < de_share(table) < 1.0
    for t in range(1, 120):
        table = compile_table(
            gdpr_fleet, loaded(gdpr_fleet, statuses, eu_west=0.5), now + t, previous=table
        )
    assert weights(lookup(table, DE, M70)) == {"eu-west": 1.0}


def test_weight_forced_off_a_down_region_resets_the_spill(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = loaded(gdpr_fleet, statuses, eu_west=1.5, eu_central=1.3, ap_south=0.2)
    before = compile_table(gdpr_fleet, given, now)
    assert "eu-central" not in weights(lookup(before, US, M70))  # it passed the spill on
    down = dict(given, **{"eu-west": replace(given["eu-west"], state=S.DOWN, ramp=0.0)})
    down["eu-central"] = replace(down["eu-central"], demand=0.5, headroom=0.5)
    after = weights(lookup(compile_table(gdpr_fleet, down, now + 1, previous=before), US, M70))
    assert after == {"eu-central": 1.0}  # first tier now, with room: not its old 10% share


def test_slow_start_still_caps_a_recovering_first_tier(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = loaded(gdpr_fleet, statuses, eu_west=0.1)
    given["eu-west"] = replace(given["eu-west"], state=S.RECOVERING, ramp=0.25)
    before = compile_table(gdpr_fleet, given, now)
    assert de_share(before) == 0.25
    given["eu-west"] = replace(given["eu-west"], ramp=0.3)
    after = compile_table(gdpr_fleet, given, now + 1, previous=before)
    assert 0.25 < de_share(after) <= 0.3


def test_spill_settles_without_oscillating_behind_caching_resolvers(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    """Closed loop: eu-west's demand follows the DE share resolvers hold, TTL/2 + 1 s late."""
    offered = 1.5  # eu-west's demand if it kept everything; eu-central is as big, idle
    lag = gdpr_fleet.ttl // 2 + 1
    held = [1.0] * lag  # the share the resolvers hold, oldest first
    table: RoutingTable | None = None
    shares = []
    for t in range(150):
        seen = offered * sum(held) / lag
        given = loaded(gdpr_fleet, statuses, eu_west=seen, eu_central=offered - seen)
        table = compile_table(gdpr_fleet, given, now + t, previous=table)
        shares.append(de_share(table))
        held = [*held[1:], shares[-1]]
    steps = [b - a for a, b in pairwise(shares)]
    assert max(abs(s) for s in steps) < 0.1  # no jumps: resolvers see a smooth change
    moves = [s for s in steps if abs(s) > 0.005]
    reversals = sum(1 for a, b in pairwise(moves) if a * b < 0)
    assert reversals <= 1  # one dip from the undamped first answer, then no ringing
    settled = shares[60:]
    assert max(settled) - min(settled) < 0.03  # a fixed point, not a limit cycle
    assert offered * settled[-1] == pytest.approx(0.9, abs=0.04)  # at the target


def test_demand_reaches_the_table_and_its_json(
    gdpr_fleet: Fleet, beats: Callable[..., dict[str, Heartbeat]], now: float
) -> None:
    overloaded = {"requests_running": 512, "requests_waiting": 512}
    given = beats(gdpr_fleet, now, server=overloaded, gpu={"util_pct": 100.0})
    evaluation = evaluate_fleet(gdpr_fleet, given, {}, now)
    status = evaluation.statuses["eu-west"]
    assert status.demand is not None and status.demand > 1.5 and status.headroom == 0.0
    table = compile_table(gdpr_fleet, evaluation.statuses, now)
    doc = table_to_json(table)
    assert doc["regions"]["eu-west"]["demand"] == status.demand
    assert table_from_json(doc).regions["eu-west"].demand == status.demand
