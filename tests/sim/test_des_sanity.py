"""The discrete-event simulation against hand-computed figures and its conservation laws."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.worlds import ONE_ENDPOINT
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.estimator import service_rates
from trafficmgr.routing.geo import country_location, rtt_ms
from trafficmgr.routing.types import Fleet
from trafficmgr.sim.des import DONE, Simulation
from trafficmgr.sim.faults import Fault
from trafficmgr.sim.policies import make_policy
from trafficmgr.sim.run import POLICIES, simulate
from trafficmgr.sim.traces import Trace, TraceRequest
from trafficmgr.sim.workload import build_workload


def _run(
    fleet: Fleet,
    trace: Trace,
    policy: str = "ai_aware",
    load: float | None = None,
    faults: tuple[Fault, ...] = (),
) -> tuple[Simulation, object]:
    workload = build_workload(fleet, trace, load, seed=3)
    sim = Simulation(fleet, workload, make_policy(policy, 3), seed=3, faults=faults)
    return sim, sim.run()


@pytest.mark.parametrize("policy", POLICIES)
def test_single_request_latency_is_rtt_plus_prefill_plus_decode(policy: str) -> None:
    fleet = load_fleet_text(ONE_ENDPOINT)
    trace = Trace("<one>", "azure", (TraceRequest(0.0, 3000, 41),))
    sim, _ = _run(fleet, trace, policy)
    rates = service_rates(fleet.gpu_profiles["H100"], 2)
    client = country_location("US").point
    assert client is not None
    rtt = rtt_ms(client, fleet.regions[0].location) / 1000
    prefill = 3000 / rates.prefill_tokens_per_s
    decode = 40 / rates.single_stream_tokens_per_s  # the first token comes from the prefill
    assert sim.status == [DONE]
    assert sim.ttft[0] == pytest.approx(rtt + prefill, rel=1e-9)
    assert sim.latency[0] == pytest.approx(rtt + prefill + decode, rel=1e-9)


def test_two_requests_prefill_first_come_first_served() -> None:
    fleet = load_fleet_text(ONE_ENDPOINT)
    trace = Trace("<two>", "azure", (TraceRequest(0.0, 24000, 1), TraceRequest(0.0, 2400, 1)))
    sim, _ = _run(fleet, trace)
    rates = service_rates(fleet.gpu_profiles["H100"], 2)
    first, second = sim.ttft
    assert second - first == pytest.approx(2400 / rates.prefill_tokens_per_s, rel=1e-6)


def test_prefix_cache_saves_the_shared_blocks() -> None:
    fleet = load_fleet_text(ONE_ENDPOINT)
    blocks = tuple(range(8))
    trace = Trace(
        "<prefix>",
        "mooncake",
        (TraceRequest(0.0, 4096, 1, None, blocks), TraceRequest(10.0, 4096, 1, None, blocks)),
    )
    sim, _ = _run(fleet, trace)
    rates = service_rates(fleet.gpu_profiles["H100"], 2)
    cold, warm = sim.ttft
    assert cold - warm == pytest.approx(4095 / rates.prefill_tokens_per_s, rel=1e-6)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_request_completes_or_is_rejected(
    sim_world: Fleet, policy: str, steady_trace: Callable[..., Trace]
) -> None:
    trace = steady_trace(rate=40, seconds=30, input_tokens=3000, output_tokens=200)
    faults = (Fault("euw-1", 5, 12), Fault("us-east", 8, 20))
    result = simulate(sim_world, trace, [policy], load=1.3, seed=1, faults=faults)
    entry = result.document["policies"][policy]
    assert entry["completed"] + entry["rejected"] == entry["requests"] == len(trace.requests)
    assert entry["rejected"] > 0  # the faults lost some
    assert entry["residency_violations"] == 0


def test_same_seed_same_result(sim_world: Fleet, steady_trace: Callable[..., Trace]) -> None:
    trace = steady_trace(rate=20, seconds=20)
    a = simulate(sim_world, trace, ["ai_aware", "round_robin"], load=0.7, seed=5).document
    b = simulate(sim_world, trace, ["ai_aware", "round_robin"], load=0.7, seed=5).document
    assert a == b


def test_load_rescales_arrivals_to_the_estimated_capacity(
    sim_world: Fleet, steady_trace: Callable[..., Trace]
) -> None:
    trace = steady_trace(rate=10, seconds=100)
    workload = build_workload(sim_world, trace, 0.5, seed=0)
    assert workload.offered_rps == pytest.approx(0.5 * workload.capacity_rps, rel=1e-9)
    gaps = workload.requests[1].send_at - workload.requests[0].send_at
    assert gaps == pytest.approx(1 / workload.offered_rps, rel=1e-9)


def test_utilisation_matches_offered_work_below_saturation(
    sim_world: Fleet, steady_trace: Callable[..., Trace]
) -> None:
    trace = steady_trace(rate=10, seconds=200, input_tokens=2000, output_tokens=30)
    result = simulate(sim_world, trace, ["ai_aware"], load=0.5, seed=2)
    entry = result.document["policies"]["ai_aware"]
    assert entry["rejected"] == 0
    assert 0.2 < entry["util_mean"] < 0.8
