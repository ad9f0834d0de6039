"""The heartbeat's JSON form (docs/architecture.md §4 names) and its sequence numbers."""

from __future__ import annotations

import json
import math

from agents.heartbeat import (
    GpuReading,
    Heartbeat,
    ProbeReading,
    SeqCounter,
    ServerReading,
    iso8601,
    to_json,
)

GPU_KEYS = {
    "index",
    "uuid",
    "name",
    "util_pct",
    "mem_used_mb",
    "mem_total_mb",
    "temp_c",
    "power_w",
    "throttle_reasons",
    "ecc_errors",
    "xid_errors",
}
SERVER_KEYS = {
    "kind",
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "tokens_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "models_loaded",
}


def sample() -> Heartbeat:
    return Heartbeat(
        endpoint="euw-1",
        seq=1_735_689_600_000,
        sent_at=1_735_689_600.25,
        interval_s=1.0,
        gpus=(GpuReading(0, "GPU-a", "NVIDIA H100 80GB HBM3", util_pct=math.nan, temp_c=61.0),),
        server=ServerReading("vllm", 4, 1, 0.5, math.inf, 120.0, 300.0, ("llama-3-70b",)),
        probe=ProbeReading(True, 3.14159),
    )


def test_contract_names() -> None:
    doc = to_json(sample())
    assert {"endpoint", "seq", "sent_at", "gpus", "server", "probe"} <= set(doc)
    assert set(doc["gpus"][0]) >= GPU_KEYS
    assert set(doc["server"]) >= SERVER_KEYS
    assert {"ok", "latency_ms"} <= set(doc["probe"])
    assert doc["sent_at"] == "2025-01-01T00:00:00.250Z"


def test_json_has_no_nan_or_infinity() -> None:
    doc = to_json(sample())
    json.dumps(doc, allow_nan=False)
    assert doc["gpus"][0]["util_pct"] is None and doc["server"]["tokens_per_s"] is None
    assert doc["probe"]["latency_ms"] == 3.1


def test_absent_parts_are_null() -> None:
    doc = to_json(Heartbeat("e", 1, 0.0, 1.0))
    assert doc["gpus"] == [] and doc["server"] is None and doc["probe"] is None
    assert "drill" not in doc


def test_seq_strictly_increases_even_when_the_clock_steps_back() -> None:
    times = iter([100.0, 100.0, 99.0, 100.0005, 250.0])
    counter = SeqCounter(lambda: next(times))
    got = [counter.next() for _ in range(5)]
    assert got == [100_000, 100_001, 100_002, 100_003, 250_000]


def test_a_restarted_agent_starts_above_its_predecessor() -> None:
    now = [1_000.0]
    first = SeqCounter(lambda: now[0])
    last = max(first.next() for _ in range(50))  # 50 heartbeats within one second
    now[0] += 1.0  # restart a second later
    assert SeqCounter(lambda: now[0]).next() > last


def test_iso8601_is_utc_with_milliseconds() -> None:
    assert iso8601(0.0) == "1970-01-01T00:00:00.000Z"


def test_odd_values_are_bounded_not_sent_raw() -> None:
    hb = Heartbeat(
        endpoint="euw-1",
        seq=1,
        sent_at=0.0,
        interval_s=1.0,
        gpus=(
            GpuReading(
                0,
                "GPU-a",
                "H100",
                util_pct=130.0,
                mem_used_mb=90.0,
                mem_total_mb=80.0,
                temp_c=-300.0,
                ecc_errors=-1,
                errors=tuple("e" * 999 for _ in range(40)),
            ),
        ),
        server=ServerReading("vllm", -3, 2, 1.7, 50.0, 1e12, 1e12, error="x" * 2000),
        probe=ProbeReading(False, 5.0, 200, "r" * 999),
    )
    doc = to_json(hb)
    gpu, server = doc["gpus"][0], doc["server"]
    assert gpu["util_pct"] == 100 and gpu["mem_used_mb"] == 80 and gpu["temp_c"] is None
    assert gpu["ecc_errors"] is None
    assert len(gpu["errors"]) == 16 and all(len(e) == 200 for e in gpu["errors"])
    assert server["requests_running"] is None and server["kv_cache_usage"] == 1.0
    assert server["ttft_p99_ms"] == 1e7 and len(server["error"]) == 500
    assert len(doc["probe"]["reason"]) == 500
