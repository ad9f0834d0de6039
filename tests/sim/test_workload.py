"""Workload: seeded clients and models, load scaling, and what the engine may see."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from trafficmgr.routing.types import Fleet
from trafficmgr.sim.des import Simulation
from trafficmgr.sim.policies import Choice, EnginePolicy
from trafficmgr.sim.traces import Trace, TraceRequest
from trafficmgr.sim.workload import build_workload, capacity_rps, model_shares


def test_clients_follow_the_fleet_shares(
    sim_world: Fleet, steady_trace: Callable[..., Trace]
) -> None:
    workload = build_workload(sim_world, steady_trace(rate=100, seconds=40), 0.5, seed=1)
    countries = Counter(r.country for r in workload.requests)
    assert countries["DE"] / len(workload.requests) == pytest.approx(0.5, abs=0.03)
    assert set(countries) == {"DE", "US"}
    assert all(r.request.client.continent in ("EU", "NA") for r in workload.requests)


def test_models_follow_the_capacity_the_fleet_was_built_for(sim_world: Fleet) -> None:
    shares = model_shares(sim_world)
    # the L4 serves only "small": it adds all of its capacity there
    assert shares["small"] > shares["big"]
    assert sum(shares.values()) == pytest.approx(1.0)


def test_trace_model_names_map_onto_fleet_models(sim_world: Fleet) -> None:
    reqs = tuple(
        TraceRequest(k * 0.1, 100, 10, ("ChatGPT", "GPT-4", "small")[k % 3]) for k in range(30)
    )
    workload = build_workload(sim_world, Trace("<b>", "burstgpt", reqs), None, seed=0)
    got = {(t.model, w.request.model) for t, w in zip(reqs, workload.requests, strict=True)}
    assert got == {("ChatGPT", "small"), ("GPT-4", "big"), ("small", "small")}


def test_capacity_adds_each_endpoints_full_batch_rate(sim_world: Fleet) -> None:
    # per endpoint: 1 / (input / prefill rate + output / decode rate)
    expected = sum(
        1 / (1000 / p + 100 / d)
        for p, d in ((96000, 19200), (6000, 1400), (48000, 10400), (96000, 19200))
    )
    assert capacity_rps(sim_world, 1000, 100) == pytest.approx(expected)


def test_the_engine_never_sees_the_true_output_length(sim_world: Fleet) -> None:
    reqs = tuple(TraceRequest(k * 0.5, 500, 3000) for k in range(3))
    workload = build_workload(sim_world, Trace("<long>", "azure", reqs), None, seed=0)
    seen: list[float] = []

    class Spy(EnginePolicy):
        def choose(self, *args: Any, **kwargs: Any) -> Choice:
            choice = super().choose(*args, **kwargs)
            seen.append(choice.expected_output)
            return choice

    Simulation(sim_world, workload, Spy("ai_aware", 0)).run()
    assert seen and all(abs(e - 128) < 10 for e in seen)  # the prior: nothing completed yet
