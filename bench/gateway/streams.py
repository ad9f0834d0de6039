"""1,000 streams held open at once through one gateway process, next to vLLM Router.

Why: an inference gateway spends most of its life holding long streams, not answering short
requests; how many one process holds, at what CPU and memory, and whether any is lost, is
what sizes a deployment (``bench/gateway/overhead.py`` measures the short-request side).

    .venv/bin/python -m bench.gateway.streams [--streams 1000] [--stream-tokens 200]
        [--vllm-router PATH] [--policies round_robin] [--json OUT]

Two simulated H100x8 endpoints in real time (1,024 serving slots, so every stream decodes at
once; ~38 tokens/s each, a 200-token answer takes ~5 s), the router pinned to core 0, the
simulated servers and the load generator (a separate process) on core 1. The load generator
opens ``--streams`` streamed chat completions within one second and reads each to
``[DONE]``. Per target: streams completed and failed, TTFT and end-to-end p50/p99 (ms), the
router's CPU seconds over the phase and its peak resident memory (VmHWM).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gateway import procs
from bench.suite import write_json

FLEET = """\
zone: bench.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
regions:
  - name: bench
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: sim-1, address: "10.0.0.1:8000", gpu: H100, gpus: 8, models: [bench]}
      - {name: sim-2, address: "10.0.0.2:8000", gpu: H100, gpus: 8, models: [bench]}
"""
HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {procs.TOKEN}"}


async def one_stream(session: Any, url: str, body: bytes, out: list[Any]) -> None:
    """Read one stream to its end; append (ttft, e2e), or what went wrong."""
    t = time.perf_counter()
    ttft = None
    try:
        async with session.post(url, data=body, headers=HEADERS) as r:
            if r.status != 200:
                out.append(f"status {r.status}")
                return
            async for line in r.content:
                if ttft is None and line.startswith(b"data: {"):
                    ttft = time.perf_counter() - t
                if line.startswith(b'data: {"error"'):
                    out.append("error event")
                    return
                if line.startswith(b"data: [DONE]"):
                    out.append((ttft, time.perf_counter() - t))
                    return
        out.append("no [DONE]")
    except Exception as exc:  # a lost stream is a result
        out.append(type(exc).__name__)


def _q(xs: list[float], p: float) -> float:
    return 1000 * xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0.0


async def loadgen(url: str, streams: int, tokens: int) -> dict[str, Any]:
    """Open ``streams`` streams within one second; read them all to the end."""
    import aiohttp

    body = {"model": "bench", "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": tokens, "ignore_eos": True, "stream": True}  # fmt: skip
    raw = json.dumps(body).encode()
    out: list[Any] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = []
        for _ in range(streams):
            tasks.append(asyncio.ensure_future(one_stream(session, url, raw, out)))
            await asyncio.sleep(1.0 / streams)
        await asyncio.gather(*tasks)
    done = [x for x in out if isinstance(x, tuple)]
    ttft = sorted(x[0] for x in done if x[0] is not None)
    e2e = sorted(x[1] for x in done)
    errors: dict[str, int] = {}
    for x in out:
        if not isinstance(x, tuple):
            errors[x] = errors.get(x, 0) + 1
    return {"streams": streams, "completed": len(done), "errors": errors,
            "ttft_p50_ms": _q(ttft, 0.5), "ttft_p99_ms": _q(ttft, 0.99),
            "e2e_p50_ms": _q(e2e, 0.5), "e2e_p99_ms": _q(e2e, 0.99)}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12)) / 100.0


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(name: str, port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    before = cpu_seconds(pid)
    cmd = [*procs.module("bench.gateway.streams"), "--loadgen", url, "--streams", str(args.streams),
           "--stream-tokens", str(args.stream_tokens)]  # fmt: skip
    out = subprocess.run(
        procs.pinned(cmd, procs.SIM_CPU), cwd=procs.ROOT, capture_output=True, text=True, check=True
    )
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    row |= {"target": name, "cpu_s": cpu_seconds(pid) - before, "rss_mb": peak_rss_mb(pid)}
    row["load_average"] = procs.load_average()
    print(f"  {json.dumps(row)}", file=sys.stderr)
    return row


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fleet_file = Path(tmp) / "fleet.yaml"
        fleet_file.write_text(FLEET)
        with procs.simulated_fleet(str(fleet_file), 1.0) as (_, path, addresses):
            for _ in range(args.repeats):
                with procs.gateway(path) as (port, proc):
                    rows.append(measure("trafficmgr (ai_aware)", port, proc.pid, args))
                binary = procs.router_binary(args.vllm_router)
                for policy in [p for p in args.policies.split(",") if p] if binary else []:
                    assert binary is not None
                    pools = {"all": list(addresses.values())}
                    with procs.vllm_routers(binary, pools, policy) as (ports, procs_):
                        name = f"vllm-router ({policy})"
                        rows.append(measure(name, ports["all"], procs_[0].pid, args))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| target | streams | completed | failed | TTFT p50 / p99 ms | e2e p50 / p99 ms "
        "| router CPU s | peak RSS MB | load average |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['target']} | {r['streams']} | {r['completed']} | {sum(r['errors'].values())} "
            f"| {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} "
            f"| {r['e2e_p50_ms']:.0f} / {r['e2e_p99_ms']:.0f} | {r['cpu_s']:.2f} "
            f"| {r['rss_mb']:.0f} | {r['load_average']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--stream-tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--vllm-router", help="vllm-router binary (default: PATH, then var/)")
    p.add_argument("--policies", default="round_robin")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--loadgen", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.loadgen:
        import uvloop

        print(json.dumps(uvloop.run(loadgen(args.loadgen, args.streams, args.stream_tokens))))
        return 0
    rows = run(args)
    print(table(rows))
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
