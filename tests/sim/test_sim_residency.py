"""Residency is never violated in simulation: any policy, any load, any fault."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trafficmgr.routing.types import Fleet
from trafficmgr.sim.des import DONE
from trafficmgr.sim.faults import Fault
from trafficmgr.sim.run import POLICIES, simulate
from trafficmgr.sim.traces import Trace


@pytest.mark.parametrize(
    "faults",
    [
        (),
        (Fault("eu-west", 5, 25),),
        (Fault("eu-west", 5, 25), Fault("eu-central", 8, 30)),  # every EU region down at once
        (Fault("euw-1", 3, 12), Fault("us-east", 4, 9)),
    ],
)
def test_no_policy_sends_eu_clients_outside_the_eu(
    sim_world: Fleet, steady_trace: Callable[..., Trace], faults: tuple[Fault, ...]
) -> None:
    trace = steady_trace(rate=30, seconds=40, input_tokens=1500, output_tokens=60)
    result = simulate(sim_world, trace, POLICIES, load=1.2, seed=9, faults=faults)
    for name, outcome in result.outcomes.items():
        assert result.document["policies"][name]["residency_violations"] == 0, name
        for i, r in enumerate(outcome.region_of):
            if result.workload.requests[i].country == "DE" and r >= 0:
                assert outcome.regions[r] in ("eu-west", "eu-central"), name


def test_all_eu_regions_down_rejects_eu_clients_but_serves_the_rest(
    sim_world: Fleet, steady_trace: Callable[..., Trace]
) -> None:
    trace = steady_trace(rate=30, seconds=40, input_tokens=1500, output_tokens=60)
    faults = (Fault("eu-west", 5, 100), Fault("eu-central", 5, 100))
    result = simulate(sim_world, trace, ["ai_aware"], load=None, seed=9, faults=faults)
    outcome = result.outcomes["ai_aware"]
    reqs = result.workload.requests
    late_de = [i for i, r in enumerate(reqs) if r.country == "DE" and r.send_at > 6]
    late_us = [i for i, r in enumerate(reqs) if r.country == "US" and r.send_at > 6]
    assert all(outcome.status[i] != DONE for i in late_de)
    assert all(outcome.status[i] == DONE for i in late_us)
