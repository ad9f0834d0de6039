"""The simulated node: a queueing model that yields NVML- and vLLM-shaped numbers."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from agents.nvml import NvmlCollector
from agents.server_metrics import ServerMetrics
from agents.sim_nvml import SimulatedNvml
from agents.sim_traces import PoissonArrivals, TraceArrivals, TraceError, TraceRequest, read_trace
from agents.simulate import SIM_GPUS, NodeSimulation

FIXTURES = Path(__file__).parent / "fixtures"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def node(
    load: float,
    clock: Clock,
    gpus: int = 8,
    trace: list[TraceRequest] | None = None,
    endpoint: str = "sim",
) -> NodeSimulation:
    return NodeSimulation(
        SIM_GPUS["H100"],
        gpus,
        load=load,
        trace=trace,
        seed=11,
        clock=clock,
        models=("llama-3-70b",),
        endpoint=endpoint,
    )


def test_moderate_load_is_busy_but_not_queueing() -> None:
    clock = Clock()
    sim = node(0.6, clock)
    clock.t = 60.0
    sim.sync()
    assert 50 < sim.gpu_state(0).util_pct < 95
    assert sim.finished > 500
    assert 0 < sim.kv_usage < 0.8
    assert len(sim.waiting) < 10
    assert 0 < len(sim.running) < sim.max_running


def test_overload_builds_a_queue() -> None:
    clock = Clock()
    sim = node(2.0, clock, gpus=2)
    clock.t = 30.0
    sim.sync()
    early = len(sim.waiting)
    clock.t = 60.0
    sim.sync()
    assert len(sim.waiting) > early > 50
    assert len(sim.running) == sim.max_running
    assert sim.gpu_state(0).util_pct > 95


def test_idle_node_looks_idle_through_nvml() -> None:
    clock = Clock()
    sim = node(0.0, clock)
    collector = NvmlCollector(SimulatedNvml(sim))
    collector.open()
    gpus = collector.read()
    assert len(gpus) == 8
    assert all(g.util_pct is not None and g.util_pct <= 2 for g in gpus)
    assert all(g.power_w is not None and g.power_w < 100 for g in gpus)
    assert sum("gpu_idle" in g.throttle_reasons for g in gpus) >= 4


def test_nvml_facade_looks_like_an_h100_node() -> None:
    clock = Clock()
    sim = node(0.6, clock, endpoint="euw-1")
    collector = NvmlCollector(SimulatedNvml(sim))
    collector.open()
    gpus = collector.read()
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert len({g.uuid for g in gpus}) == 8 and all(g.uuid.startswith("GPU-") for g in gpus)
    assert all(g.mem_total_mb == 81559 and g.power_limit_w == 700 for g in gpus)
    assert all(not g.errors and not g.lost for g in gpus)
    clock.t = 1.0
    # The model simulates NVML's kernel-busy reading and offers no GPM: every reading says so.
    assert {g.util_source for g in (*gpus, *collector.read())} == {"nvml_util"}
    again = NvmlCollector(SimulatedNvml(node(0.6, Clock(), endpoint="euw-1")))
    again.open()
    assert [g.uuid for g in again.read()] == [g.uuid for g in gpus]  # stable per endpoint


def test_metrics_page_round_trips_through_the_real_parser() -> None:
    clock = Clock()
    sim = node(0.8, clock)
    metrics = ServerMetrics(sim.metrics_text, "vllm", label="sim", clock=clock)
    first = metrics.collect()
    clock.t += 2.0
    r = metrics.collect()
    assert (r.kind, r.garbage_lines) == ("sim", 0) and first.kind == "sim"
    assert r.requests_running == len(sim.running)
    assert r.requests_waiting == len(sim.waiting)
    assert r.kv_cache_usage == pytest.approx(sim.kv_usage)
    assert r.tokens_per_s is not None and r.tokens_per_s > 1000
    assert r.ttft_p50_ms is not None and r.ttft_p99_ms is not None
    assert 0 < r.ttft_p50_ms <= r.ttft_p99_ms


def test_same_seed_same_numbers() -> None:
    a, b = node(0.6, Clock()), node(0.6, Clock())
    assert a.metrics_text() == b.metrics_text()


def test_trace_driven_load() -> None:
    trace = read_trace(FIXTURES / "azure_code_300.csv")
    clock = Clock()
    sim = node(0.5, clock, trace=trace)
    clock.t = 60.0
    sim.sync()
    assert sim.finished > 100
    assert 30 < sim.gpu_state(0).util_pct < 95


def test_probe_reports_the_models() -> None:
    probe = node(0.3, Clock()).probe()
    assert probe.ok and probe.models == ("llama-3-70b",) and probe.latency_ms is not None


def test_reads_azure_and_mooncake_traces() -> None:
    azure = read_trace(FIXTURES / "azure_code_300.csv")
    assert len(azure) == 300 and azure[0].at == 0.0
    assert (azure[0].input_tokens, azure[0].output_tokens) == (4808, 10)
    assert all(b.at >= a.at for a, b in itertools.pairwise(azure))
    mooncake = read_trace(FIXTURES / "mooncake_80.jsonl")
    assert len(mooncake) == 80 and mooncake[0].input_tokens == 40160


def test_reads_burstgpt_and_skips_failed_requests(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "7.5,GPT-4,1087,0,1087,Conversation log\n"
        "9,ChatGPT,300,120,420,API log\n"
    )
    trace = read_trace(path)
    assert [(r.at, r.input_tokens, r.output_tokens) for r in trace] == [(0, 472, 18), (4, 300, 120)]


@pytest.mark.parametrize("text", ["a,b,c\n1,2,3\n", "TIMESTAMP,ContextTokens,GeneratedTokens\n"])
def test_unreadable_traces_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError):
        read_trace(path)


def test_trace_replay_loops_and_scales() -> None:
    trace = [TraceRequest(0.0, 10, 5), TraceRequest(1.0, 20, 5), TraceRequest(2.0, 30, 5)]
    assert [r.at for r in TraceArrivals(trace, 1.0).until(7.0)] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [r.at for r in TraceArrivals(trace, 2.0).until(7.0)] == [0, 2, 4, 6]


def test_poisson_rate() -> None:
    arrivals = PoissonArrivals(20.0, random.Random(5)).until(100.0)
    assert 1800 < len(arrivals) < 2200
    assert all(r.input_tokens >= 1 and r.output_tokens >= 1 for r in arrivals)
