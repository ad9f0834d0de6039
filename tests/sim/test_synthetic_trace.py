"""The seeded BurstGPT-format trace: the same file for a seed, read back as BurstGPT."""

from __future__ import annotations

import io
from pathlib import Path

from trafficmgr.sim.synthetic import rows, write
from trafficmgr.sim.traces import BURSTGPT, read_trace


def test_a_seed_gives_the_same_trace_and_another_seed_another() -> None:
    assert rows(500, seed=3) == rows(500, seed=3)
    assert rows(500, seed=3) != rows(500, seed=4)


def test_it_reads_back_as_a_bursty_two_model_burstgpt_trace(tmp_path: Path) -> None:
    buffer = io.StringIO()
    write(buffer, 3000, seed=1)
    path = tmp_path / "burst.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    trace = read_trace(str(path))
    assert trace.format == BURSTGPT
    assert len(trace.requests) == 3000
    assert not trace.warnings
    assert {r.model for r in trace.requests} == {"ChatGPT", "GPT-4"}
    gaps = [b.at - a.at for a, b in zip(trace.requests, trace.requests[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
    assert cv > 1.2  # burstier than Poisson arrivals (cv 1)
    outputs = sum(r.output_tokens for r in trace.requests) / len(trace.requests)
    assert outputs > 150  # decode-heavy, unlike the Azure code trace


def test_the_committed_example_is_the_seeded_one() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "traces" / "burstgpt_synthetic.csv"
    buffer = io.StringIO()
    write(buffer, 6000, seed=1)
    assert example.read_text(encoding="utf-8") == buffer.getvalue()
