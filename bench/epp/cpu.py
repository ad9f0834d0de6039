"""The endpoint picker's CPU per request and decision latency, in the llm-d router's terms.

Envoy and the EPP (``bench/epp/envoy.py``, one Envoy worker, both pinned to core 0) in front
of ``bench/gateway/overhead.py``'s two simulated servers, its load generator on core 1
(non-streamed chat, 1 output token). Per build, two phases: open loop at ``--rate`` req/s
and closed loop with ``--concurrency`` in flight (the peak). For each: requests/s, the EPP's
and Envoy's CPU µs per request (``/proc``, apart), the EPP's cores per 1,000 requests/s, and
the decision latency p50 / p99: the EPP's time on the message that routes (the request body
in ``BUFFERED``: body read, the core's pick, the reply built; gRPC's own time is not in it),
the llm-d router's "scheduler latency". The EPP runs as ``bench/epp/timed.py``.

``--build NAME=DIR`` (repeatable) runs the EPP from the ``trafficmgr`` package under ``DIR``
(``source``: the checkout; ``compiled``: ``scripts/build_compiled.py``'s build); the builds are
measured in turn, ``--rounds`` times, and each figure is the median over the rounds, so a
before/after pair on a shared machine sees the same drift::

    .venv/bin/python -m bench.epp.cpu --build source --build compiled --rounds 3 \\
        --json bench/results/epp_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.epp.envoy import envoy_binary, envoy_epp
from bench.gateway.overhead import run_loadgen, simulated_servers
from bench.suite import ROOT, compiled_env, cpu_seconds, write_json

TIMED = ("-m", "bench.epp.timed")


def _percentile(values: Sequence[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1000.0 if ordered else 0.0


def _timings(pid: int, path: Path) -> dict[str, list[int]]:
    """The EPP's per-message samples since the last call (``bench/epp/timed.py``)."""
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the EPP wrote no timings")
        time.sleep(0.05)
    samples: dict[str, list[int]] = json.loads(path.read_text())
    return samples


def phase(
    pair: Any, timings: Path, rate: float, duration: float, concurrency: int
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{pair.port}/v1/chat/completions"
    _timings(pair.epp_pid, timings)
    epp, envoy = cpu_seconds(pair.epp_pid), cpu_seconds(pair.envoy_pid)
    load = run_loadgen(url, rate, duration, concurrency)
    epp, envoy = cpu_seconds(pair.epp_pid) - epp, cpu_seconds(pair.envoy_pid) - envoy
    samples = _timings(pair.epp_pid, timings)
    done = max(1, load["requests"])
    routing = samples.get("request_body", [])
    return {
        "rps": load["rps"],
        "requests": load["requests"],
        "errors": load["errors"],
        "e2e_p50_ms": load["p50_ms"],
        "e2e_p99_ms": load["p99_ms"],
        "epp_cpu_us_per_request": 1e6 * epp / done,
        "envoy_cpu_us_per_request": 1e6 * envoy / done,
        # µs per request = cores per 1,000 requests/s × 1,000
        "epp_cores_per_1000_rps": epp / done * 1000,
        "decision_p50_us": _percentile(routing, 0.5),
        "decision_p99_us": _percentile(routing, 0.99),
        "messages_per_request": sum(len(v) for v in samples.values()) / done,
        "exchange_us_per_request": sum(sum(v) for v in samples.values()) / 1000 / done,
    }


def measure(
    args: argparse.Namespace, fleet: Path, name: str, env: dict[str, str]
) -> dict[str, Any]:
    binary = envoy_binary()
    if binary is None:
        raise SystemExit("Envoy not found: bash scripts/peers/envoy.sh installs it")
    with tempfile.TemporaryDirectory() as tmp:
        timings = Path(tmp) / "timings.json"
        epp_env = {**env, "EPP_TIMINGS": str(timings)}
        with envoy_epp(fleet, binary, body_mode=args.body_mode, epp_program=TIMED,
                       epp_env=epp_env) as pair:  # fmt: skip
            steady = phase(pair, timings, args.rate, args.duration, 0)
            peak = phase(pair, timings, 0, args.peak_duration, args.concurrency)
    row = {"build": name, "body_mode": args.body_mode, "steady": steady, "peak": peak}
    print(f"  {json.dumps(row)}", file=sys.stderr)
    return row


def builds(specs: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """``NAME=DIR``, ``source`` or ``compiled`` → (name, the EPP's environment)."""
    out = []
    for spec in specs:
        name, _, where = spec.partition("=")
        if name == "compiled" and not where:
            env = compiled_env()
        else:
            path = Path(where or ROOT).resolve()
            if not (path / "trafficmgr").is_dir():
                raise SystemExit(f"--build {spec}: no trafficmgr package under {path}")
            env = {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(path)}
        out.append((name, env))
    return out


def _median(values: list[Any]) -> Any:
    if isinstance(values[0], dict):
        return {k: _median([v[k] for v in values]) for k in values[0]}
    if isinstance(values[0], (int, float)):
        return statistics.median(values)
    return values[0]


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'build':<12} {'phase':<6} {'req/s':>7} {'EPP us/req':>10} {'Envoy us/req':>12}"
        f" {'EPP cores/1k rps':>16} {'decision p50/p99 us':>20} {'msgs/req':>8} {'err':>4}"
    )
    lines = [head]
    for r in rows:
        for phase_name in ("steady", "peak"):
            p = r[phase_name]
            lines.append(
                f"{r['build']:<12} {phase_name:<6} {p['rps']:>7.0f}"
                f" {p['epp_cpu_us_per_request']:>10.0f} {p['envoy_cpu_us_per_request']:>12.0f}"
                f" {p['epp_cores_per_1000_rps']:>16.2f}"
                f" {p['decision_p50_us']:>9.0f} / {p['decision_p99_us']:<8.0f}"
                f" {p['messages_per_request']:>8.2f} {p['errors']:>4}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", action="append", default=[], help="NAME=DIR, source or compiled")
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--peak-duration", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--body-mode", default="buffered", choices=["buffered", "streamed"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the medians and every round here")
    args = p.parse_args(argv)
    chosen = builds(args.build or ["source"])
    rounds: list[list[dict[str, Any]]] = []
    with simulated_servers() as (_, fleet):
        for i in range(max(1, args.rounds)):
            print(f"round {i + 1}/{args.rounds}", file=sys.stderr)
            rounds.append([measure(args, fleet, name, env) for name, env in chosen])
    rows = [_median(list(per_build)) for per_build in zip(*rounds, strict=True)]
    print(table(rows))
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"(medians of {len(rounds)} rounds; load average {load})")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        doc = {"medians": rows, "rounds": rounds, "load_average": load, "args": vars(args)}
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
