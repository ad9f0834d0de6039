"""Measure what one simulated-server process holds: requests/s and concurrent streams.

Not a test (pytest does not collect it): a script whose figures docs/simserver.md quotes.
It starts ``python -m trafficmgr.simserver`` as a child pinned to one core (``taskset``
when present) and drives it from this process on another core with aiohttp, closed-loop:

    .venv/bin/python tests/simserver/capacity.py requests --concurrency 64 --duration 10
    .venv/bin/python tests/simserver/capacity.py streams --streams 1000 --tokens 300

``requests``: non-streamed chat completions of a 32-word prompt and 16 output tokens
(``ignore_eos``) at ``--time-scale 1000``, so the GPU model takes ~no time and the figure
is the server's own cost. ``streams``: ``--streams`` chat streams opened at once on an
8xH100 endpoint at real time, each of ``--tokens`` tokens; reports how many were open
together, the tokens received per second, TTFT and the server's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def start_server(port: int, time_scale: float, gpus: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "trafficmgr.simserver", "--listen", f"127.0.0.1:{port}",
           "--gpu", "H100", "--gpus", str(gpus), "--models", "m",
           "--time-scale", str(time_scale)]  # fmt: skip
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", "0", *cmd]
        os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(b"ready"):
            return proc
    raise RuntimeError("server did not start")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body(tokens: int, stream: bool) -> bytes:
    doc = {
        "model": "m",
        "messages": [{"role": "user", "content": "word " * 32}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    return json.dumps(doc).encode()


async def requests_load(
    url: str, concurrency: int, duration: float, stream: bool
) -> dict[str, float]:
    data, latencies, errors = body(16, stream), [], 0
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.monotonic() + duration

        async def worker() -> None:
            nonlocal errors
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                async with session.post(url, data=data, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
                latencies.append(time.monotonic() - t0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    latencies.sort()
    return {
        "requests": len(latencies),
        "requests_per_s": len(latencies) / duration,
        "errors": errors,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(0.99 * len(latencies))],
    }


async def streams_load(url: str, streams: int, tokens: int) -> dict[str, float]:
    data, headers = body(tokens, True), {"Content-Type": "application/json"}
    open_now = peak = received = 0
    ttfts: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> None:
            nonlocal open_now, peak, received
            t0 = time.monotonic()
            async with session.post(url, data=data, headers=headers) as r:
                open_now += 1
                peak = max(peak, open_now)
                first = True
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        received += 1
                        if first:
                            ttfts.append(time.monotonic() - t0)
                            first = False
                open_now -= 1

        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(streams)))
        elapsed = time.monotonic() - t0
    ttfts.sort()
    return {
        "streams": streams,
        "peak_open": peak,
        "events": received,
        "events_per_s": received / elapsed,
        "elapsed_s": elapsed,
        "ttft_p50_ms": 1000 * statistics.median(ttfts),
        "ttft_p99_ms": 1000 * ttfts[int(0.99 * len(ttfts))],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("requests", "streams"))
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--tokens", type=int, default=300)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--stream", action="store_true", help="requests: streamed (16 events)")
    p.add_argument("--time-scale", type=float, default=0.0, help="default: 1000 / 1")
    args = p.parse_args()
    port = free_port()
    scale = args.time_scale or (1000.0 if args.mode == "requests" else 1.0)
    proc = start_server(port, scale, args.gpus)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        if args.mode == "requests":
            result = asyncio.run(requests_load(url, args.concurrency, args.duration, args.stream))
        else:
            result = asyncio.run(streams_load(url, args.streams, args.tokens))
        used = cpu_seconds(proc.pid) - cpu0
        result["server_cpu"] = used / (time.monotonic() - t0)  # cores
        done = result.get("requests") or result["events"]
        result["server_cpu_us_per_" + ("request" if "requests" in result else "event")] = (
            1e6 * used / done
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    print(json.dumps({k: round(v, 3) for k, v in result.items()}, indent=2))


if __name__ == "__main__":
    main()
