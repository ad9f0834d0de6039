"""The example fleet fails over the way operators expect, and the table says why in plain words.

With us-east down, US clients go to us-west (same continent, room to spare), not across the
Atlantic; only when us-west is full too does some of their traffic cross, and the reason then
names what was passed over: "us-east down; us-west full (headroom 2%); nearest with room: ...".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.routing.conftest import make_beat
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.routing.failover import RegionMachine, evaluate_fleet
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.table import compile_table, lookup
from trafficmgr.routing.types import Fleet, Heartbeat, RegionState, RoutingTable

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"
US = country_location("US")
FULL = {"gpu": {"util_pct": 98.0}, "server": {"kv_cache_usage": 0.98}}


@pytest.fixture(scope="module")
def example() -> Fleet:
    return load_fleet_file(str(EXAMPLE))


def heartbeats(fleet: Fleet, at: float, **by_region: dict[str, Any]) -> dict[str, Heartbeat]:
    """Light load everywhere; ``us_east={"probe_ok": False}`` changes one region's beats."""
    return {
        e.name: make_beat(e.name, at, gpus=e.gpus, **by_region.get(r.name.replace("-", "_"), {}))
        for r in fleet.regions
        for e in r.endpoints
    }


def table_after(fleet: Fleet, now: float, **by_region: dict[str, Any]) -> RoutingTable:
    """Evaluate three ticks of the same heartbeats (down needs its streak), then compile."""
    machines: Mapping[str, RegionMachine] = {}
    for tick in range(3):
        evaluation = evaluate_fleet(
            fleet, heartbeats(fleet, now + tick, **by_region), machines, now + tick
        )
        machines = evaluation.machines
    return compile_table(fleet, evaluation.statuses, now + 3)


def test_us_clients_use_both_us_regions_and_nothing_else(example: Fleet, now: float) -> None:
    table = table_after(example, now)
    for model in example.models():
        answers = lookup(table, US, model)
        assert {w.region for w in answers} == {"us-east", "us-west"}
        assert all("down" not in w.reason and "full" not in w.reason for w in answers)


def test_us_east_down_sends_us_clients_to_us_west_and_says_why(example: Fleet, now: float) -> None:
    table = table_after(example, now, us_east={"probe_ok": False})
    assert table.regions["us-east"].state is RegionState.DOWN
    for model in example.models():
        (answer,) = lookup(table, US, model)
        assert answer.region == "us-west" and answer.weight == 1.0
        assert answer.reason.startswith("us-east down; nearest with room: us-west ~37 ms; ")


def test_only_a_full_continent_crosses_the_ocean_and_the_reason_says_so(
    example: Fleet, now: float
) -> None:
    table = table_after(example, now, us_east={"probe_ok": False}, us_west=FULL)
    for model in example.models():
        answers = {w.region: w for w in lookup(table, US, model)}
        assert answers["us-west"].weight > 0.9  # it keeps what it can serve
        crossing = answers["eu-west"]
        assert 0 < crossing.weight < 0.1
        assert crossing.reason.startswith(
            "us-east down; us-west full (headroom 2%); nearest with room: eu-west ~103 ms"
        ), crossing.reason
        assert "ap-southeast" not in answers


def test_eea_clients_stay_in_the_eea_regions_and_russia_is_not_bound(
    example: Fleet, now: float
) -> None:
    table = table_after(example, now, eu_west={"probe_ok": False})
    for country in ("IE", "FR", "DE", "NO"):
        answers = lookup(table, country_location(country), "llama-3-70b")
        assert {w.region for w in answers} == {"eu-central"} and "gdpr" in answers[0].reason
    (irish,) = lookup(table, country_location("IE"), "llama-3-70b")  # eu-west is its nearest
    assert irish.reason.startswith("eu-west down; nearest with room: eu-central ~")
    for country in ("RU", "GB"):  # in Europe, outside the EEA: no rule binds them
        assert all(
            "gdpr" not in w.reason for w in lookup(table, country_location(country), "llama-3-70b")
        )


def test_a_tier_with_room_again_says_it_is_taking_traffic_back(example: Fleet, now: float) -> None:
    full = table_after(example, now, us_east={"probe_ok": False}, us_west=FULL)
    machines: Mapping[str, RegionMachine] = {}
    for tick in range(3):
        beats = heartbeats(example, now + tick, us_east={"probe_ok": False})
        evaluation = evaluate_fleet(example, beats, machines, now + tick)
        machines = evaluation.machines
    later = compile_table(example, evaluation.statuses, now + 4, previous=full)
    answers = {w.region: w for w in lookup(later, US, "llama-3-70b")}
    assert 0 < answers["eu-west"].weight < full_weight(full, "eu-west")  # moving back, damped
    assert answers["eu-west"].reason.startswith("us-east down; us-west taking traffic back (keeps")


def full_weight(table: RoutingTable, region: str) -> float:
    return next(w.weight for w in lookup(table, US, "llama-3-70b") if w.region == region)
