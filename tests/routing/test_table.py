"""Compiling, looking up, limiting, versioning, serialising and diffing the routing table."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from trafficmgr.routing.table import (
    compile_table,
    diff_tables,
    lookup,
    static_table,
    table_from_json,
    table_to_json,
    table_zones,
    zone_keys,
)
from trafficmgr.routing.types import (
    AllDown,
    ClientLocation,
    Endpoint,
    Fleet,
    GpuProfile,
    RegionState,
    RegionStatus,
    RoutingTable,
    WeightedRegion,
)

S = RegionState
Statuses = Callable[..., dict[str, RegionStatus]]
DE = ClientLocation("DE", "EU")
IN = ClientLocation("IN", "AS")
M70 = "llama-3-70b"


def weights(entries: tuple[WeightedRegion, ...]) -> dict[str, float]:
    return {w.region: w.weight for w in entries}


def with_policy(fleet: Fleet, **changes: Any) -> Fleet:
    return replace(fleet, failover=replace(fleet.failover, **changes))


def test_static_table_applies_residency_priority_and_drains(fleet: Fleet, now: float) -> None:
    table = static_table(fleet, now)
    india = lookup(table, IN, M70)
    assert weights(india) == {"ap-south": 1.0}
    assert "india-local" in india[0].reason
    assert weights(lookup(table, ClientLocation("US", "NA"), M70)) == {"eu-west": 1.0}
    assert weights(lookup(table, ClientLocation("IE", "EU"), M70)) == {"eu-west": 1.0}
    assert all("us-east" not in weights(ws) for ms in table.zones.values() for ws in ms.values())


def test_unknown_regions_serve_by_configuration(fleet: Fleet, now: float) -> None:
    table = compile_table(fleet, {}, now)
    assert table.zones == static_table(fleet, now).zones
    assert "no evidence yet" in lookup(table, DE, M70)[0].reason
    assert table.regions["eu-west"].state is S.UNKNOWN


def test_zones_cover_clients_rule_countries_continents_and_default(fleet: Fleet) -> None:
    zones = set(table_zones(fleet))
    assert {"IE", "US", "IN", "EU", "NA", "AS", "SA", "AF", "OC", "AN", "default"} == zones
    chosen = set(table_zones(fleet, ["de", "FR", "NA", "country:NA", "XX"]))
    assert {"DE", "FR", "country:NA", "NA", "IN", "default"} <= chosen
    assert "IE" not in chosen and "XX" not in chosen


def test_zone_keys_go_from_country_to_continent_to_default() -> None:
    assert zone_keys(DE) == ("DE", "EU", "default")
    assert zone_keys(ClientLocation(country="fr")) == ("FR", "EU", "default")
    assert zone_keys(ClientLocation(country="NA")) == ("country:NA", "AF", "default")
    assert zone_keys(ClientLocation()) == ("default",)


def test_lookup_falls_back_and_never_invents_a_model(fleet: Fleet, now: float) -> None:
    table = static_table(fleet, now)
    assert lookup(table, ClientLocation("FR", "EU"), M70) == table.zones["EU"][M70]
    assert lookup(table, ClientLocation(country="NA"), M70) == table.zones["AF"][M70]
    assert lookup(table, ClientLocation(), M70) == table.zones["default"][M70]
    assert lookup(table, DE, "model-nobody-serves") == ()


def test_down_priority_fails_over_inside_the_jurisdiction(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    table = compile_table(gdpr_fleet, statuses(gdpr_fleet, S.HEALTHY, eu_west=S.DOWN), now)
    (entry,) = lookup(table, DE, M70)
    assert entry.region == "eu-central" and entry.weight == 1.0
    assert "failover: priority 1 out (eu-west down)" in entry.reason
    assert "gdpr" in entry.reason


def test_overload_spills_to_the_next_priority(
    gdpr_fleet: Fleet, statuses: Statuses, status: Callable[..., RegionStatus], now: float
) -> None:
    given = statuses(gdpr_fleet, S.HEALTHY)
    given["eu-west"] = status(S.HEALTHY, headroom=0.0, demand=1.5)
    entries = lookup(compile_table(gdpr_fleet, given, now), DE, M70)
    assert weights(entries) == {"eu-west": 0.6, "eu-central": 0.4}  # 0.9 / 1.5 kept
    note = "spillover from eu-west (demand 150% of capacity, target 90%: keeps 60%)"
    assert note in entries[1].reason


def test_short_headroom_alone_spills_what_exceeds_the_target(
    gdpr_fleet: Fleet, statuses: Statuses, status: Callable[..., RegionStatus], now: float
) -> None:
    given = statuses(gdpr_fleet, S.HEALTHY)
    given["eu-west"] = status(S.HEALTHY, headroom=0.02)  # no demand figure: 98% busy
    entries = weights(lookup(compile_table(gdpr_fleet, given, now), DE, M70))
    assert entries["eu-west"] == pytest.approx(0.9 / 0.98, abs=1e-4)


def test_slow_start_limits_a_recovering_region(
    gdpr_fleet: Fleet, statuses: Statuses, status: Callable[..., RegionStatus], now: float
) -> None:
    given = statuses(gdpr_fleet, S.HEALTHY)
    given["eu-west"] = status(S.RECOVERING, ramp=0.2)
    entries = lookup(compile_table(gdpr_fleet, given, now), DE, M70)
    assert weights(entries) == {"eu-central": 0.8, "eu-west": 0.2}
    assert "slow start 20%" in entries[1].reason


def test_proximity_weighs_regions_of_one_priority(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    regions = tuple(replace(r, priority=1) for r in gdpr_fleet.regions)
    fleet = replace(gdpr_fleet, regions=regions)
    table = compile_table(fleet, statuses(fleet, S.HEALTHY), now, zones=["DE", "IE"])
    de = weights(lookup(table, DE, M70))
    ie = weights(lookup(table, ClientLocation("IE", "EU"), M70))
    assert de["eu-central"] > de["eu-west"] > 0
    assert ie["eu-west"] > ie["eu-central"]
    assert "rtt ~" in lookup(table, DE, M70)[0].reason


def test_all_down_fail_open_answers_the_allowed_regions_only(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    table = compile_table(gdpr_fleet, statuses(gdpr_fleet, S.DOWN), now)
    entries = lookup(table, DE, M70)
    assert set(weights(entries)) == {"eu-west", "eu-central"}
    assert all(w.reason.startswith("fail_open") for w in entries)
    assert table.notes["EU"][M70].startswith("fail_open")
    assert set(weights(lookup(table, IN, M70))) == {"ap-south"}


def test_all_down_fail_closed_answers_nothing_and_says_why(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    fleet = with_policy(gdpr_fleet, all_down=AllDown.FAIL_CLOSED)
    table = compile_table(fleet, statuses(fleet, S.HEALTHY, eu_west=S.DOWN, eu_central=S.DOWN), now)
    assert lookup(table, DE, M70) == ()
    assert table.notes["EU"][M70].startswith("fail_closed: all allowed regions down")
    assert weights(lookup(table, ClientLocation("US", "NA"), M70)) == {"ap-south": 1.0}


def test_residency_rule_whose_regions_are_all_down(
    fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = statuses(fleet, S.HEALTHY, ap_south=S.DOWN)
    opened = lookup(compile_table(fleet, given, now), IN, M70)
    assert weights(opened) == {"ap-south": 1.0} and "fail_open" in opened[0].reason
    closed = compile_table(with_policy(fleet, all_down=AllDown.FAIL_CLOSED), given, now)
    assert lookup(closed, IN, M70) == ()
    assert "india-local" in closed.notes["IN"][M70]


def test_drained_regions_are_never_answered_even_fail_open(
    fleet: Fleet, statuses: Statuses, now: float
) -> None:
    table = compile_table(fleet, statuses(fleet, S.DOWN), now)
    assert all("us-east" not in weights(ws) for ms in table.zones.values() for ws in ms.values())


def test_model_served_only_outside_the_jurisdiction(fleet: Fleet, now: float) -> None:
    region = fleet.region("eu-west")
    extra = Endpoint("euw-9", "eu-west", "10.1.0.19:8000", "L4", 1, ("eu-model",))
    grown = replace(region, endpoints=(*region.endpoints, extra))
    fleet = replace(fleet, regions=tuple(grown if r is region else r for r in fleet.regions))
    table = static_table(fleet, now)
    assert lookup(table, IN, "eu-model") == ()
    assert "no allowed region serves the model" in table.notes["IN"]["eu-model"]
    assert weights(lookup(table, DE, "eu-model")) == {"eu-west": 1.0}


def test_zero_capacity_regions_are_skipped_or_fail_open(
    fleet: Fleet, statuses: Statuses, status: Callable[..., RegionStatus], now: float
) -> None:
    given = statuses(fleet, S.HEALTHY)
    given["eu-west"] = status(S.HEALTHY, capacity=0.0)
    table = compile_table(fleet, given, now)
    assert weights(lookup(table, DE, M70)) == {"ap-south": 1.0}
    given["ap-south"] = status(S.HEALTHY, capacity=0.0)
    table = compile_table(fleet, given, now)
    assert lookup(table, IN, M70)[0].reason.startswith("fail_open")


def test_unknown_gpu_type_means_no_configured_capacity(fleet: Fleet, now: float) -> None:
    fleet = replace(fleet, gpu_profiles={"H100": GpuProfile("H100", 1, 1, 1)})
    table = static_table(fleet, now)
    india = lookup(table, IN, M70)  # ap-south runs A100s, which have no profile now
    assert weights(india) == {"ap-south": 1.0} and india[0].reason.startswith("fail_open")


def test_fleet_without_regions_gives_an_empty_but_defined_table(fleet: Fleet, now: float) -> None:
    empty = replace(fleet, regions=(), residency=())
    table = static_table(empty, now)
    assert table.regions == {} and set(table.zones["default"]) == set()
    assert lookup(table, DE, M70) == ()
    assert static_table(empty, now + 5).version == table.version


def test_max_shift_limits_moves_but_not_leaving_a_down_region(
    gdpr_fleet: Fleet, statuses: Statuses, status: Callable[..., RegionStatus], now: float
) -> None:
    fleet = with_policy(gdpr_fleet, max_shift_per_tick=0.2)
    before = compile_table(fleet, statuses(fleet, S.HEALTHY), now)
    busy = statuses(fleet, S.HEALTHY)
    busy["eu-west"] = status(S.HEALTHY, headroom=0.0, demand=2.0)
    unlimited = compile_table(fleet, busy, now + 1)
    assert weights(lookup(unlimited, DE, M70)) == {"eu-west": 0.45, "eu-central": 0.55}
    # A minute later the spill damping lets 63% of the move through: the valve cuts it to 20%.
    limited = compile_table(fleet, busy, now + 60, previous=before)
    entries = lookup(limited, DE, M70)
    assert weights(entries) == {"eu-west": 0.8, "eu-central": 0.2}
    assert "shift limited to 20% per tick" in entries[0].reason
    down = compile_table(fleet, statuses(fleet, S.HEALTHY, eu_west=S.DOWN), now + 61, limited)
    assert weights(lookup(down, DE, M70)) == {"eu-central": 1.0}


def test_same_inputs_same_table_and_version(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    given = statuses(gdpr_fleet, S.HEALTHY, eu_west=S.DEGRADED)
    first = compile_table(gdpr_fleet, given, now)
    again = compile_table(gdpr_fleet, dict(given), now)
    later = compile_table(gdpr_fleet, given, now + 60)
    assert first == again
    assert later.version == first.version and later.zones == first.zones
    changed = compile_table(gdpr_fleet, statuses(gdpr_fleet, S.HEALTHY), now)
    assert changed.version != first.version
    assert len(first.version) == 12


def test_every_list_sums_to_exactly_one_in_four_decimals(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    regions = tuple(replace(r, priority=1) for r in gdpr_fleet.regions)
    fleet = replace(gdpr_fleet, regions=regions)
    table = compile_table(fleet, statuses(fleet, S.HEALTHY), now)
    for lists in table.zones.values():
        for entries in lists.values():
            units = [round(w.weight * 10_000) for w in entries]
            assert all(
                abs(u - w.weight * 10_000) < 1e-6 for u, w in zip(units, entries, strict=True)
            )
            assert sum(units) == 10_000 and all(u > 0 for u in units)


def test_json_has_the_api_shape_and_round_trips(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    fleet = with_policy(gdpr_fleet, all_down=AllDown.FAIL_CLOSED)
    table = compile_table(fleet, statuses(fleet, S.DOWN, ap_south=S.HEALTHY), 1_700_000_000.5)
    doc = json.loads(json.dumps(table_to_json(table)))
    assert set(doc) >= {"version", "generated_at", "regions", "zones"}
    assert doc["generated_at"] == "2023-11-14T22:13:20.500000Z"
    assert doc["regions"]["eu-west"]["state"] == "down"
    assert {"state", "headroom", "capacity", "reason", "ramp"} <= set(doc["regions"]["eu-west"])
    assert doc["zones"]["IN"][M70] == [
        {"region": "ap-south", "weight": 1.0, "reason": lookup(table, IN, M70)[0].reason}
    ]
    assert doc["zones"]["EU"][M70] == [] and "fail_closed" in doc["notes"]["EU"][M70]
    assert table_from_json(doc) == table


@pytest.mark.parametrize(
    "doc",
    [
        None,
        [],
        {},
        {"version": "x", "generated_at": "nope", "regions": {}, "zones": {}},
        {
            "version": "x",
            "generated_at": 0,
            "regions": {"a": {"state": "bogus", "headroom": 1}},
            "zones": {},
        },
        {"version": "x", "generated_at": 0, "regions": {}, "zones": {"DE": {"m": [{"w": 1}]}}},
    ],
)
def test_malformed_json_is_refused(doc: object) -> None:
    with pytest.raises(ValueError):
        table_from_json(doc)


def test_diff_names_state_changes_and_moved_lists(
    gdpr_fleet: Fleet, statuses: Statuses, now: float
) -> None:
    before = compile_table(gdpr_fleet, statuses(gdpr_fleet, S.HEALTHY), now)
    after = compile_table(gdpr_fleet, statuses(gdpr_fleet, S.HEALTHY, eu_west=S.DOWN), now + 1)
    assert not diff_tables(before, before).changed
    diff = diff_tables(before, after)
    assert [(c.region, c.old, c.new) for c in diff.regions] == [("eu-west", S.HEALTHY, S.DOWN)]
    de = next(c for c in diff.lists if (c.zone, c.model) == ("EU", M70))
    assert de.moved == pytest.approx(1.0)
    assert diff.max_moved == pytest.approx(1.0)
    assert "eu-west healthy → down" in diff.summary()
    first = diff_tables(None, before)
    assert first.old_version is None and first.changed


def test_table_is_a_routing_table(fleet: Fleet, now: float) -> None:
    table = static_table(fleet, now)
    assert isinstance(table, RoutingTable) and table.generated_at == now
