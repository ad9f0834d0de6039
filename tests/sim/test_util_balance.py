"""Utilisation spread: the fleet-wide CoV, over serving endpoints, and inside each region."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from trafficmgr.routing.types import Fleet
from trafficmgr.sim.metrics import coefficient_of_variation, region_balance
from trafficmgr.sim.run import simulate
from trafficmgr.sim.traces import Trace

REGION = {"a1": "a", "a2": "a", "b1": "b", "b2": "b", "s1": "standby"}


def test_weighted_cov_is_the_plain_one_when_weights_are_equal() -> None:
    values = [0.2, 0.5, 0.9]
    assert coefficient_of_variation(values, [3.0, 3.0, 3.0]) == pytest.approx(
        coefficient_of_variation(values)
    )


def test_weighted_cov_counts_a_large_endpoint_for_its_capacity() -> None:
    # one endpoint with 9x the capacity at 0.8, one small one idle: the region is at 0.72
    cov = coefficient_of_variation([0.8, 0.0], [9.0, 1.0])
    assert cov == pytest.approx(math.sqrt(0.9 * 0.08**2 + 0.1 * 0.72**2) / 0.72)


def test_regions_at_different_levels_are_balanced_inside() -> None:
    util = {"a1": 0.9, "a2": 0.9, "b1": 0.3, "b2": 0.3, "s1": 0.0}
    caps = dict.fromkeys(util, 1.0)
    regions, in_region = region_balance(util, REGION, caps)
    assert in_region == pytest.approx(0.0)
    assert coefficient_of_variation(list(util.values())) > 0.5
    assert regions["standby"] == {"mean": 0.0, "cov": None}
    assert regions["a"] == {"mean": 0.9, "cov": 0.0}


def test_regions_weigh_by_the_work_they_served() -> None:
    util = {"a1": 0.8, "a2": 0.4, "b1": 0.1, "b2": 0.0, "s1": 0.0}
    caps = {"a1": 1.0, "a2": 1.0, "b1": 1.0, "b2": 1.0, "s1": 1.0}
    regions, in_region = region_balance(util, REGION, caps)
    cov_a, cov_b = regions["a"]["cov"], regions["b"]["cov"]
    assert cov_a == pytest.approx(1 / 3, abs=1e-4)
    assert cov_b == pytest.approx(1.0)
    assert in_region == pytest.approx((1.2 * (1 / 3) + 0.1 * 1.0) / 1.3)


def test_the_run_reports_every_spread(sim_world: Fleet, steady_trace: Callable[..., Trace]) -> None:
    doc = simulate(sim_world, steady_trace(rate=20, seconds=30), ["ai_aware"], load=0.5).document
    entry = doc["policies"]["ai_aware"]
    assert set(entry["util_by_region"]) == {"eu-west", "eu-central", "us-east"}
    one_endpoint = [entry["util_by_region"]["eu-central"], entry["util_by_region"]["us-east"]]
    assert all(r["cov"] == 0.0 for r in one_endpoint if r["mean"])
    assert entry["util_cov_region"] >= 0.0
    # leaving idle endpoints out never raises a CoV
    assert entry["util_cov_serving"] <= entry["util_cov"] + 1e-9
