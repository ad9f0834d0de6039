"""A server killed mid-run: what clients see, how fast it is ejected, how it comes back.

Why: the promise is that a dead server costs no client-visible error for a request that had
not started streaming, that the gateway stops sending to it within a second, and that it
returns gradually (slow start) rather than at full share; this measures each, with vLLM
Router over the same servers for the client-visible part.

    .venv/bin/python -m bench.gateway.faults [--rate 25] [--kind down] [--vllm-router PATH]
        [--policies power_of_two] [--json OUT]

One region of three simulated H100x2 endpoints in real time (``--rate`` requests/s of 2,000-
word prompts is about 0.7 of their prefill capacity, so prompts queue and, when the server
dies, several of its requests have no token yet). The load generator (a process of its own)
sends an open loop of requests, three in four streamed, for ``--duration`` s; at
``--kill-at`` it sets the fault ``--kind`` (``down``: in-flight requests aborted, new ones
503; ``refuse``: the port closed) on one endpoint through the simulated server's
``/admin/fault``, and clears it at ``--restore-at``. For the gateway it polls ``/metrics``
every 20 ms (``trafficmgr_gateway_ejected``) and reads which endpoint served each request
(``x-trafficmgr-endpoint``): time from the kill to the ejection, from the restore to the
return (ejection time, then a half-open probe), and the returned endpoint's share of
requests per 2 s after it (slow start: the fleet's 15 s ramp from 10 %).
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

VICTIM = "sim-1"
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
      - {name: sim-1, address: "10.0.0.1:8000", gpu: H100, gpus: 2, models: [bench]}
      - {name: sim-2, address: "10.0.0.2:8000", gpu: H100, gpus: 2, models: [bench]}
      - {name: sim-3, address: "10.0.0.3:8000", gpu: H100, gpus: 2, models: [bench]}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 15, all_down: fail_open}
"""


async def one(session: Any, spec: dict[str, Any], i: int, t0: float) -> list[Any]:
    """Send request ``i``; return [sent_s, first_s, end_s, endpoint, error, stream]."""
    stream = i % 4 != 0
    prompt = " ".join([f"q{i:x}"] * 2000)
    body = {"model": "bench", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 64, "ignore_eos": True, "stream": stream}  # fmt: skip
    headers = {"Authorization": f"Bearer {procs.TOKEN}"}
    sent, first, error, endpoint = time.perf_counter() - t0, None, None, None
    try:
        async with session.post(spec["url"], json=body, headers=headers) as r:
            endpoint = r.headers.get("x-trafficmgr-endpoint")
            if r.status != 200:
                error = f"status {r.status}"
            elif not stream:
                await r.read()
                first = time.perf_counter() - t0
            else:
                error = "no [DONE]"
                async for line in r.content:
                    if line.startswith(b'data: {"error"'):
                        error = "error event"
                        break
                    if first is None and line.startswith(b"data: {"):
                        first = time.perf_counter() - t0
                    if line.startswith(b"data: [DONE]"):
                        error = None
                        break
    except Exception as exc:  # a failed request is a result
        error = type(exc).__name__
    return [sent, first, time.perf_counter() - t0, endpoint, error, stream]


async def fault(session: Any, spec: dict[str, Any], kind: str) -> None:
    doc = {"kind": kind, "endpoint": VICTIM}
    async with session.post(spec["admin"], json=doc) as r:
        await r.read()


async def watch(session: Any, spec: dict[str, Any], t0: float, out: list[Any]) -> None:
    """Record (time, ejected) whenever the gateway's ejected gauge for the victim changes."""
    needle = f'trafficmgr_gateway_ejected{{endpoint="{VICTIM}"}}'
    last = None
    while True:
        try:
            async with session.get(spec["metrics"]) as r:
                now = needle in await r.text()
        except Exception:
            now = last
        if now != last:
            out.append((time.perf_counter() - t0, now))
            last = now
        await asyncio.sleep(0.02)


async def loadgen(spec: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    changes: list[Any] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:
        t0 = time.perf_counter()
        watcher = (
            asyncio.ensure_future(watch(session, spec, t0, changes)) if spec["metrics"] else None
        )
        tasks, events = [], [(spec["kill_at"], spec["kind"]), (spec["restore_at"], "none")]
        n = int(spec["rate"] * spec["duration"])
        for i in range(n):
            at = i / spec["rate"]
            while events and events[0][0] <= at:
                await fault(session, spec, events.pop(0)[1])
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(session, spec, i, t0)))
        results = await asyncio.gather(*tasks)
        if watcher is not None:
            watcher.cancel()
    return {"requests": results, "ejected_changes": changes}


def summarise(spec: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    reqs = result["requests"]
    unstarted = [r for r in reqs if r[4] is not None and r[1] is None]
    started = [r for r in reqs if r[4] is not None and r[1] is not None]
    changes = result["ejected_changes"]
    ejected = next((t for t, on in changes if on and t >= spec["kill_at"]), None)
    back = next((t for t, on in changes if not on and t >= spec["restore_at"]), None)
    share = []
    if back is not None:
        for k in range(12):
            lo = back + 2 * k
            window = [r for r in reqs if lo <= r[0] < lo + 2 and r[3]]
            mine = sum(1 for r in window if r[3] == VICTIM)
            share.append(round(mine / len(window), 2) if window else None)
    return {
        "requests": len(reqs),
        "errors_before_first_token": len(unstarted),
        "errors_after_first_token": len(started),
        "error_kinds": sorted({r[4] for r in reqs if r[4] is not None}),
        "ejected_after_s": round(ejected - spec["kill_at"], 3) if ejected is not None else None,
        "returned_after_restore_s": round(back - spec["restore_at"], 3) if back else None,
        "victim_share_per_2s_after_return": share,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=25.0)
    p.add_argument("--duration", type=float, default=50.0)
    p.add_argument("--kill-at", type=float, default=10.0)
    p.add_argument("--restore-at", type=float, default=20.0)
    p.add_argument("--kind", default="down", choices=["down", "refuse"])
    p.add_argument("--vllm-router", help="vllm-router binary (default: PATH, then var/)")
    p.add_argument("--policies", default="power_of_two")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--loadgen", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.loadgen:
        import uvloop

        spec = json.loads(Path(args.loadgen).read_text())
        Path(spec["out"]).write_text(json.dumps(uvloop.run(loadgen(spec))))
        return 0
    rows = run(args)
    for row in rows:
        print(json.dumps(row))
    if args.json:
        write_json(args.json, rows)
    return 0


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    targets = ["gateway"]
    binary = procs.router_binary(args.vllm_router)
    if binary:
        targets += [f"vllm-router:{p}" for p in args.policies.split(",") if p]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fleet_file = Path(tmp) / "fleet.yaml"
        fleet_file.write_text(FLEET)
        for target in targets:
            with procs.simulated_fleet(str(fleet_file), 1.0) as (_, path, addresses):
                spec = {"rate": args.rate, "duration": args.duration, "kind": args.kind,
                        "kill_at": args.kill_at, "restore_at": args.restore_at,
                        "admin": f"http://{addresses['sim-2']}/admin/fault",
                        "out": str(Path(tmp) / "out.json")}  # fmt: skip
                if target == "gateway":
                    with procs.gateway(path) as (port, _):
                        spec["url"] = f"http://127.0.0.1:{port}/v1/chat/completions"
                        spec["metrics"] = f"http://127.0.0.1:{port}/metrics"
                        result = _loadgen(spec, Path(tmp))
                else:
                    assert binary is not None
                    pools = {"all": list(addresses.values())}
                    with procs.vllm_routers(binary, pools, target.split(":")[1]) as (ports, _):
                        spec["url"] = f"http://127.0.0.1:{ports['all']}/v1/chat/completions"
                        spec["metrics"] = None
                        result = _loadgen(spec, Path(tmp))
            row = {"target": target, "kind": args.kind, **summarise(spec, result)}
            row["load_average"] = procs.load_average()
            rows.append(row)
    return rows


def _loadgen(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    cmd = [*procs.module("bench.gateway.faults"), "--loadgen", str(path)]
    subprocess.run(procs.pinned(cmd, procs.SIM_CPU), cwd=procs.ROOT, check=True)
    result: dict[str, Any] = json.loads(Path(spec["out"]).read_text())
    return result


if __name__ == "__main__":
    sys.exit(main())
