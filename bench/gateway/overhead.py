"""Added latency and peak throughput of the gateway, next to direct and vLLM Router.

Method of vLLM Router's ``docs/benchmarks/router_overhead.md``: the same requests go to the
simulated server directly and through each router; a router's overhead is its mean latency
minus the direct mean (also per percentile). The load generator is a separate process
(``--loadgen``), pinned to another core than the router when ``taskset`` exists; as root,
every process of the benchmark runs at ``nice -n -10`` (``BENCH_NICE``), so that other work
on a shared machine delays each target less (the same for every target).

Phases, per target (direct, trafficmgr, Envoy + the EPP, vLLM Router per policy):

1. open loop at ``--rate`` req/s for ``--duration`` s (non-streaming chat, 1 output token):
   mean / p50 / p99 latency and the overhead over direct;
2. closed loop with ``--concurrency`` requests in flight for ``--peak-duration`` s: req/s,
   and req/s per CPU-second the router process used (its throughput on one core, since the
   router is pinned to core 0 while the simulator and the load generator share core 1);
3. open loop at ``--cpu-rate`` req/s (0.8 of a target's peak if that is less) for
   ``--duration`` s: the router's CPU microseconds per request (``us/req``) at a load every
   fast target carries, so that routers are compared at equal
   work even when the servers and the load generator, not the router, bound a fast router's
   peak.

    .venv/bin/python -m bench.gateway.overhead [--vllm-router PATH] [--rounds N] [--compiled]
        [--json OUT]

``--compiled`` also measures the gateway running its hot modules compiled with mypyc
(``scripts/build_compiled.py``, built first when its sources changed), as the container image
runs it.

A shared machine drifts over minutes, and the targets are measured one after the other:
``--rounds N`` measures every target N times in turn (round 1: all targets, round 2: all
again, ...) and reports each figure's median over the rounds, and the gateway's ratios to
vLLM Router's best policy round by round (the ≥ 0.5 × peak target is read on them: peak
req/s, req/s per router CPU-second, CPU µs per request).

Envoy + the EPP (``bench/epp/envoy.py``: ``python -m trafficmgr.epp`` and Envoy from
``scripts/peers/envoy.sh``, both on the routers' core, ``--envoy-workers`` worker threads) is one
target: its CPU time is the two processes'. ``--no-envoy`` leaves it out. Slow figures never
make the benchmark fail: it prints the table and the load average, and exits 0.

1,000 streams held open at once through one process: ``bench/gateway/streams.py``.

vLLM Router is the PyPI wheel ``vllm-router`` (run as ``vllm-router --worker-urls URL
--policy P``); without it only direct and trafficmgr are measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.epp.envoy import envoy_binary, envoy_epp
from bench.suite import (
    ROOT,
    compiled_env,
    cpu_seconds,
    free_port,
    module,
    pinned,
    start,
    wait_ready,
    write_json,
)

TOKEN = "bench-token"
FLEET = """\
zone: bench.example.test
ttl: 10
gpu_profiles:
  H100: {{prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}}
regions:
  - name: bench
    country: US
    location: {{lat: 39.04, lon: -77.49}}
    addresses: [198.51.100.10]
    endpoints:
      - {{name: sim-1, address: "127.0.0.1:{port}", gpu: H100, gpus: 8, models: [bench]}}
      - {{name: sim-2, address: "127.0.0.1:{port2}", gpu: H100, gpus: 8, models: [bench]}}
"""
BODY = json.dumps(
    {
        "model": "bench",
        "messages": [{"role": "user", "content": "How far is the nearest region today?"}],
        "max_tokens": 1,
        "ignore_eos": True,
    }
).encode()


# --- the load generator (a separate process) -------------------------------------------------


async def _one(pool: Any, url: tuple[str, str], lat: list[float], errors: list[int]) -> None:
    t = time.perf_counter()
    try:
        r = await pool.post(*url, BODY, _HEADERS)
        await r.read()
        if r.status != 200:
            errors.append(r.status)
            return
    except Exception:
        errors.append(0)
        return
    lat.append(time.perf_counter() - t)


_HEADERS = {"Authorization": f"Bearer {TOKEN}"}


async def loadgen(url: str, rate: float, duration: float, concurrency: int) -> dict[str, Any]:
    """Send ``BODY`` to ``url``: at ``rate`` req/s (open loop), or with ``concurrency`` in
    flight (closed loop). The client is the gateway's own upstream client (raw asyncio
    protocols and httptools): about a third of a general client's CPU per request, so that
    on the load generator's core there is room left to push the fastest target."""
    from trafficmgr.gateway.upstream import UpstreamPool

    address, _, path = url.removeprefix("http://").partition("/")
    target = (address, "/" + path)
    lat: list[float] = []
    errors: list[int] = []
    pool = UpstreamPool(5.0, 60.0, 4096, {"Content-Type": "application/json"})
    for _ in range(20):  # warm the connections and the router
        await _one(pool, target, [], [])
    start = time.perf_counter()
    if rate > 0:
        tasks = []
        n = int(rate * duration)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(pool, target, lat, errors)))
        await asyncio.gather(*tasks)
    else:
        end = start + duration

        async def worker() -> None:
            while time.perf_counter() < end:
                await _one(pool, target, lat, errors)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    pool.close()
    lat.sort()
    return {
        "requests": len(lat),
        "errors": len(errors),
        "rps": len(lat) / elapsed,
        "mean_ms": 1000 * sum(lat) / max(1, len(lat)),
        "p50_ms": 1000 * lat[len(lat) // 2] if lat else 0.0,
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0,
    }


def run_loadgen(url: str, rate: float, duration: float, concurrency: int) -> dict[str, Any]:
    cmd = [*module("bench.gateway.overhead"), "--loadgen", url, "--rate", str(rate)]
    cmd += ["--duration", str(duration), "--concurrency", str(concurrency)]
    out = subprocess.run(pinned(cmd, "1"), cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --- the benchmark ---------------------------------------------------------------------------


def measure(name: str, port: int, pids: list[int], args: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    steady = run_loadgen(url, args.rate, args.duration, 0)
    before = sum(cpu_seconds(pid) for pid in pids)
    peak = run_loadgen(url, 0, args.peak_duration, args.concurrency)
    used = sum(cpu_seconds(pid) for pid in pids) - before
    per_core = peak["requests"] / used if used > 0 else None
    # CPU per request at one load every target carries (below each peak): the cost compared
    # at equal work, whether or not a target's core saturates at its peak
    rate = min(args.cpu_rate, 0.8 * peak["rps"])  # a slower target: 0.8 of its own peak
    before = sum(cpu_seconds(pid) for pid in pids)
    level = run_loadgen(url, rate, args.duration, 0)
    level["rate"] = rate
    spent = sum(cpu_seconds(pid) for pid in pids) - before
    us_per_req = 1e6 * spent / level["requests"] if pids and level["requests"] else None
    row = {
        "target": name,
        "steady": steady,
        "peak": peak,
        "cpu_s": used,
        "rps_per_core": per_core,
        "at_cpu_rate": level,
        "cpu_us_per_request": us_per_req,
    }
    print(f"  {name}: {json.dumps(row)}", file=sys.stderr)
    return row


def targets(
    args: argparse.Namespace, sim_ports: tuple[int, int], fleet: Path
) -> list[dict[str, Any]]:
    """Measure direct (the first endpoint), the gateway, Envoy + the EPP per body mode, then
    vLLM Router per policy."""
    sim_port = sim_ports[0]
    rows = [measure("direct", sim_port, [], args)]
    builds = [("trafficmgr (ai_aware)", None)]
    if args.compiled:
        builds.append(("trafficmgr (ai_aware, compiled)", compiled_env()))
    for name, env in builds:
        port = free_port()
        gateway = start(
            [sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(fleet), "--listen",
             f"127.0.0.1:{port}", "--token", TOKEN],
            "0",
            env=env,
        )  # fmt: skip
        try:
            wait_ready(port, "/healthz")
            rows.append(measure(name, port, [gateway.pid], args))
        finally:
            gateway.terminate()
            gateway.wait(10)
    rows += _envoy_epp(args, fleet)
    router = args.vllm_router or shutil.which("vllm-router") or _installed_router()
    for policy in [p for p in args.policies.split(",") if p] if router else []:
        port = free_port()
        proc = start(
            [router, "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
             "--worker-urls", *(f"http://127.0.0.1:{p}" for p in sim_ports),
             "--log-level", "error",
             "--prometheus-port", str(free_port())],
            "0",
        )  # fmt: skip
        try:
            wait_ready(port, "/health")
            rows.append(measure(f"vllm-router ({policy})", port, [proc.pid], args))
        finally:
            proc.terminate()
            proc.wait(10)
    return rows


def _envoy_epp(args: argparse.Namespace, fleet: Path) -> list[dict[str, Any]]:
    """Measure Envoy + the EPP, when Envoy is there (scripts/peers/envoy.sh installs it)."""
    if args.no_envoy:
        return []
    binary = envoy_binary()
    if binary is None:
        print("  Envoy not found (scripts/peers/envoy.sh installs it): skipped", file=sys.stderr)
        return []
    rows = []
    for mode in [m for m in args.envoy_body_modes.split(",") if m]:
        with envoy_epp(fleet, binary, workers=args.envoy_workers, body_mode=mode) as pair:
            name = f"envoy+epp ({mode}, {args.envoy_workers}w)"
            rows.append(measure(name, pair.port, pair.pids, args))
    return rows


def _installed_router() -> str | None:
    """Return the binary scripts/peers/vllm_router.sh installs, when it is there."""
    path = ROOT / "var" / "vllm-router-venv" / "bin" / "vllm-router"
    return str(path) if path.exists() else None


def table(rows: Sequence[dict[str, Any]], rate: float) -> str:
    direct = rows[0]["steady"]
    lines = [
        f"{'target':<28} {'mean':>8} {'p50':>8} {'p99':>8} {'+mean':>8} {'+p50':>8} {'+p99':>8}"
        f" {'peak r/s':>9} {'r/s/core':>9} {'us/req':>7} {'err':>5}",
        f"{'':<28} {'(ms @ ' + str(int(rate)) + ' r/s)':>26} {'(ms over direct)':>26}",
    ]
    for r in rows:
        s, p = r["steady"], r["peak"]
        per_core = f"{r['rps_per_core']:.0f}" if r["rps_per_core"] else "-"
        us = f"{r['cpu_us_per_request']:.0f}" if r.get("cpu_us_per_request") else "-"
        errors = s["errors"] + p["errors"] + r.get("at_cpu_rate", {}).get("errors", 0)
        lines.append(
            f"{r['target']:<28} {s['mean_ms']:>8.3f} {s['p50_ms']:>8.3f} {s['p99_ms']:>8.3f}"
            f" {s['mean_ms'] - direct['mean_ms']:>8.3f} {s['p50_ms'] - direct['p50_ms']:>8.3f}"
            f" {s['p99_ms'] - direct['p99_ms']:>8.3f} {p['rps']:>9.0f} {per_core:>9} {us:>7}"
            f" {errors:>5}"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--peak-duration", type=float, default=8.0)
    p.add_argument(
        "--cpu-rate",
        type=float,
        default=2000.0,
        help="open-loop req/s at which each router's CPU per request is measured (us/req)",
    )
    p.add_argument("--vllm-router", help="path of the vllm-router binary (default: on PATH)")
    p.add_argument("--policies", default="round_robin,power_of_two,cache_aware")
    p.add_argument(
        "--compiled",
        action="store_true",
        help="also measure the gateway on the compiled build (scripts/build_compiled.py)",
    )
    p.add_argument("--no-envoy", action="store_true", help="leave Envoy + the EPP out")
    p.add_argument("--envoy-workers", type=int, default=1, help="Envoy's --concurrency")
    p.add_argument(
        "--envoy-body-modes", default="buffered,streamed", help="request body modes to measure"
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="measure every target this many times, in turn"
    )
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--loadgen", help=argparse.SUPPRESS)
    return p.parse_args(argv)


@contextlib.contextmanager
def simulated_servers() -> Iterator[tuple[tuple[int, int], Path]]:
    """Serve the bench fleet's two endpoints (one simulated-server process, on core 1);
    yield their ports and the fleet file naming them."""
    sim_ports = (free_port(), free_port())
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(FLEET.format(port=sim_ports[0], port2=sim_ports[1]))
        sim = start(
            [sys.executable, "-m", "trafficmgr.simserver", "--fleet", str(fleet),
             "--time-scale", "100"],
            "1",
        )  # fmt: skip
        try:
            for port in sim_ports:
                wait_ready(port, "/health")
            yield sim_ports, fleet
        finally:
            sim.terminate()
            sim.wait(10)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.loadgen:
        import uvloop

        result = uvloop.run(loadgen(args.loadgen, args.rate, args.duration, args.concurrency))
        print(json.dumps(result))
        return 0
    with simulated_servers() as (sim_ports, fleet):
        rounds = []
        for i in range(max(1, args.rounds)):
            print(f"round {i + 1}/{max(1, args.rounds)}", file=sys.stderr)
            rounds.append(targets(args, sim_ports, fleet))
    rows = medians(rounds)
    print(table(rows, args.rate))
    if len(rounds) > 1:
        print(f"(medians of {len(rounds)} rounds)")
    for line in against_vllm_router(rounds):
        print(line)
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        doc = rows if len(rounds) == 1 else {"medians": rows, "rounds": rounds}
        write_json(args.json, doc)
    return 0


def medians(rounds: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Return one row per target: every figure the median of its rounds (one round: as is)."""
    if len(rounds) == 1:
        return list(rounds[0])
    out = []
    for per_round in zip(*rounds, strict=True):
        out.append(_median_of(list(per_round)))
    return out


def _median_of(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {k: _median_of([v[k] for v in values]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None
    return first


def against_vllm_router(rounds: Sequence[Sequence[dict[str, Any]]]) -> list[str]:
    """Return the gateway's ratios to vLLM Router's best policy, per round and their median:
    peak req/s, req/s per router CPU-second, and CPU µs per request (its inverse: higher is
    better for the gateway in all three)."""
    names = [r["target"] for r in rounds[0] if r["target"].startswith("trafficmgr")]
    lines: list[str] = []

    def fmt(x: float | None) -> str:
        return f"{x:.2f} x" if x is not None else "-"

    for name in names:
        ratios = []
        for rows in rounds:
            gateway = next((r for r in rows if r["target"] == name), None)
            peers = [r for r in rows if r["target"].startswith("vllm-router")]
            if gateway is None or not peers:
                return []
            peak = gateway["peak"]["rps"] / max(r["peak"]["rps"] for r in peers)
            per_core = [r["rps_per_core"] for r in peers if r["rps_per_core"]]
            core = (gateway["rps_per_core"] or 0.0) / max(per_core) if per_core else None
            costs = [r["cpu_us_per_request"] for r in peers if r.get("cpu_us_per_request")]
            mine = gateway.get("cpu_us_per_request")
            cpu = min(costs) / mine if costs and mine else None
            ratios.append((peak, core, cpu))
        lines.append(f"{name} / vLLM Router's best policy (target: >= 0.5 x on one core)")
        lines.append(f"{'':<10} {'peak req/s':>11} {'req/CPU-s':>10} {'1/(CPU us)':>11}")
        for i, (peak, core, cpu) in enumerate(ratios):
            label = "round " + str(i + 1)
            lines.append(f"{label:<10} {fmt(peak):>11} {fmt(core):>10} {fmt(cpu):>11}")
        if len(ratios) > 1:
            mid = [_median_of([r[k] for r in ratios]) for k in range(3)]
            lines.append(f"{'median':<10} {fmt(mid[0]):>11} {fmt(mid[1]):>10} {fmt(mid[2]):>11}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
