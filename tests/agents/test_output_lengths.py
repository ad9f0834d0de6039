"""server.output_tokens: the inference servers' histograms of generated tokens per request."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.heartbeat import (
    ONE_MODEL,
    OutputLengths,
    ServerReading,
    compact_lengths,
    server_to_json,
)
from agents.push import HEARTBEAT_PATH, unknown_optional_key
from agents.server_metrics import ServerMetrics, parse_exposition
from agents.simulate import SIM_GPUS, NodeSimulation
from tests.agents.conftest import Stub
from tests.agents.test_push import heartbeat, pusher

FIXTURES = Path(__file__).parent / "fixtures"
LLAMA = "meta-llama/Llama-3.1-70B-Instruct"


def reading(name: str, **changes: Any) -> ServerReading:
    text = (FIXTURES / name).read_text()
    return replace(ServerMetrics(lambda: text).collect(), **changes)


def test_vllm_v1_reports_its_histogram_compacted() -> None:
    r = reading("vllm_v1.txt")
    (model, h), *_ = r.output_tokens
    assert model == LLAMA and h.count == 12480 and len(h.le) == 16
    doc = server_to_json(r)["output_tokens"]
    # the empty bounds below 10 and those past 10,000 (all requests) say nothing
    assert doc == {
        LLAMA: {
            "le": [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0],
            "counts": [0, 13, 310, 1780, 5080, 10256, 12018, 12434, 12478, 12480],
            "count": 12480,
        }
    }


def test_vllm_v0_has_no_histogram_and_sends_no_key() -> None:
    r = reading("vllm_v0.txt")
    assert r.output_tokens == () and "output_tokens" not in server_to_json(r)


def test_triton_has_none() -> None:
    r = reading("triton_trtllm.txt")
    assert r.output_tokens == () and "output_tokens" not in server_to_json(r)


def test_tgi_names_its_histogram_after_the_loaded_model() -> None:
    r = reading("tgi.txt")
    assert [m for m, _ in r.output_tokens] == [ONE_MODEL]
    assert "output_tokens" not in server_to_json(r)  # which model it counts is unknown
    doc = server_to_json(replace(r, models_loaded=("bigscience/bloom",)))["output_tokens"]
    h = doc["bigscience/bloom"]
    assert h["count"] == 5120 and h["le"][0] == 81.92 and h["counts"][0] == 992
    assert h["le"][-1] == 1720.32 and h["counts"][-1] == 5120  # the first bound holding all
    assert len(h["le"]) == 21  # of 100 finite bounds


def test_compacting_keeps_cumulative_counts_right_and_at_most_64_bounds() -> None:
    le = tuple(float(i + 1) for i in range(200))
    counts = tuple(i // 2 for i in range(200))
    h = compact_lengths(OutputLengths(le, counts, 150))
    assert h is not None and len(h.le) <= 64 and h.count == 150
    for bound, count in zip(h.le, h.counts, strict=True):
        assert count == min(counts[int(bound) - 1], 150)
    assert h.counts[-1] == 99 and all(a < b for a, b in zip(h.le, h.le[1:], strict=False))


@pytest.mark.parametrize(
    "h",
    [
        OutputLengths((1.0, 2.0), (0, 0), 0),  # nothing counted yet
        OutputLengths((2.0, 1.0), (0, 1), 1),  # not ascending
        OutputLengths((1.0, math.inf), (0, 1), 1),
        OutputLengths((), (), 3),  # no finite bound
        OutputLengths((1.0, 2.0), (0, math.nan), 1),
    ],
)
def test_what_is_not_a_histogram_is_left_out(h: OutputLengths) -> None:
    assert compact_lengths(h) is None
    r = ServerReading(kind="vllm", output_tokens=(("m", h),))
    assert "output_tokens" not in server_to_json(r)


def test_at_most_16_models() -> None:
    h = OutputLengths((10.0,), (3,), 4)
    r = ServerReading(kind="vllm", output_tokens=tuple((f"m{i}", h) for i in range(20)))
    assert len(server_to_json(r)["output_tokens"]) == 16


def test_the_simulated_server_exports_the_outputs_it_generates() -> None:
    now = [0.0]
    sim = NodeSimulation(
        SIM_GPUS["H100"], 8, load=0.6, seed=3, models=("llama-3-8b",), clock=lambda: now[0]
    )
    now[0] = 60.0
    text = sim.metrics_text()
    x = parse_exposition(text)
    assert x.has("vllm:request_generation_tokens_bucket")
    r = ServerMetrics(lambda: text).collect()
    ((model, h),) = r.output_tokens
    assert model == "llama-3-8b" and h.count == sim.finished > 100
    assert x.total("vllm:request_generation_tokens_sum") == sim.output_sum > 0
    assert server_to_json(r)["output_tokens"]["llama-3-8b"]["count"] == sim.finished


def test_an_older_control_plane_gets_heartbeats_without_output_tokens(stub: Stub) -> None:
    refusal = (400, {"fields": {"server.output_tokens": ["unknown field"]}})

    def answer(seen: Any) -> Any:
        return refusal if "output_tokens" in seen.json()["server"] else (200, {"accepted": True})

    server = {"kind": "vllm", "output_tokens": {"m": {"le": [1.0], "counts": [1], "count": 1}}}
    stub.on("POST", HEARTBEAT_PATH, answer)
    p = pusher(stub)
    p.submit({**heartbeat(1), "server": server})
    p.submit({**heartbeat(2), "server": server})
    assert p.deliver() == 2 and p.dropped == 0
    posted = [s.json() for s in stub.posts(HEARTBEAT_PATH)]
    assert [d["seq"] for d in posted] == [1, 1, 2]
    assert posted[1]["server"] == {"kind": "vllm"} == posted[2]["server"]
    assert p.omitted == {"server.output_tokens"}


def test_other_refusals_of_output_tokens_still_drop_the_heartbeat() -> None:
    body = b'{"fields": {"server.output_tokens.m.le[1]": ["bounds are strictly ascending"]}}'
    assert unknown_optional_key(body) is None
    assert unknown_optional_key(b'{"fields": {"server.kind": ["unknown field"]}}') is None
