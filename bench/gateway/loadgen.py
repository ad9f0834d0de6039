"""Replay a trace against the gateway or vLLM Router: the load generator, a process of its own.

Why a separate process: the measured routers must not share an event loop (or a GIL) with
the client. ``bench/gateway/traces.py`` and ``bench/gateway/faults.py`` run it as
``python -m bench.gateway.loadgen SPEC.json`` and read its result file.

What it sends, from the simulator's own workload (``trafficmgr.sim.workload.build_workload``:
the trace's arrivals rescaled to ``load`` of the fleet's capacity, each request's model and
client country drawn from the fleet's mix, seeded, so every target gets the same requests):

- a streamed chat completion whose prompt has exactly the trace's input length under the
  token rule (``trafficmgr.routing.prompt``: one token per word); a Mooncake request's
  ``hash_ids`` become its blocks of 512 words (block ``h`` is always the same words), so
  requests sharing hash ids share a prompt prefix and the simulated prefix cache, the
  gateway's prefix affinity and vLLM Router's radix tree all see it; other traces get
  prompts of their own, shared with nobody;
- ``max_tokens`` = the trace's output length with ``ignore_eos``: the answer has exactly
  that many tokens;
- the client's address in ``X-Forwarded-For``, drawn from a pool of addresses the bundled
  GeoIP database places in the request's country (the gateway trusts loopback as a proxy);
- to the gateway with ``x-trafficmgr-strategy``, or to the vLLM Router of the pool the
  engine's global choice (``decision.region_candidates``, the same call the gateway makes)
  gives the client, one router per (region, model).

Time: a request is sent at its model time divided by the simulated servers' time scale. The
servers' counters are read at the first and at the last arrival (the busy share of each
endpoint over the arrival window, as the simulator measures utilisation).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.geoip import Locator
from trafficmgr.routing.decision import region_candidates
from trafficmgr.routing.prompt import BLOCK_TOKENS
from trafficmgr.routing.residency import base_decision
from trafficmgr.routing.table import static_table
from trafficmgr.routing.types import Priority, Request
from trafficmgr.sim.traces import read_trace
from trafficmgr.sim.workload import build_workload

COUNTERS = ("vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total",
            "vllm:generation_tokens_total")  # fmt: skip


@dataclass(slots=True)
class Planned:
    at: float  # real seconds after the start
    model: str
    words: tuple[int, tuple[int, ...], int]  # (input tokens, hash ids, request index)
    output: int
    ip: str
    country: str
    url: str
    allowed: tuple[str, ...] | None  # regions residency allows (None: any)
    region: str | None  # the pool's region, for vLLM Router


def prompt_text(tokens: int, hash_ids: Sequence[int], index: int) -> str:
    """Return a prompt of exactly ``tokens`` words; block k of a hashed prompt is hash_ids[k]'s."""
    parts: list[str] = []
    left = tokens
    for hid in hash_ids:
        if left <= 0:
            break
        n = min(BLOCK_TOKENS, left)
        parts.append(" ".join([f"h{hid:x}"] * n))
        left -= n
    if left > 0:
        parts.append(" ".join([f"r{index:x}."] * left))
    return " ".join(parts)


def plan(spec: dict[str, Any]) -> list[Planned]:
    """Return the requests to send, in order (see the module doc)."""
    fleet = load_fleet_file(spec["fleet"])
    work = build_workload(fleet, read_trace(spec["trace"]), spec["load"], spec["seed"])
    requests = work.requests[: spec.get("limit") or None]
    rng = random.Random(spec["seed"] + 1)
    pools: dict[str, list[str]] = spec["ip_pools"]
    locator = Locator()
    table = static_table(fleet, time.time())
    out: list[Planned] = []
    for i, r in enumerate(requests):
        ip = rng.choice(pools[r.country])
        where = locator.locate(ip)
        strict = base_decision(fleet, where).strict_regions
        allowed = tuple(sorted(strict)) if strict is not None else None
        url, region = spec.get("url", ""), None
        if spec["mode"] == "router":
            ask = Request(r.request.model, where, r.request.input_tokens, r.output_tokens,
                          Priority.INTERACTIVE)  # fmt: skip
            found = region_candidates(fleet, table, ask, ip).regions
            region = found[0].region if found else None
            url = spec["routers"].get(f"{region}|{r.request.model}", "")
        tokens = max(1, r.request.input_tokens)
        out.append(
            Planned(r.send_at / spec["time_scale"], r.request.model,
                    (tokens, r.request.prefix_hashes, i), max(1, r.output_tokens), ip,
                    r.country, url, allowed, region)
        )  # fmt: skip
    return out


async def scrape(
    session: aiohttp.ClientSession, endpoints: dict[str, str]
) -> tuple[float, dict[str, list[float]]]:
    """Return when (the middle of the scrape) and each endpoint's prompt, cached-prompt and
    generated token counters; a busy server answers late, so the middle, not the start."""

    async def one(address: str) -> list[float]:
        async with session.get(f"http://{address}/metrics") as r:
            text = await r.text()
        sums = dict.fromkeys(COUNTERS, 0.0)
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in sums:
                sums[name] += float(line.rsplit(" ", 1)[1])
        return [sums[c] for c in COUNTERS]

    began = time.perf_counter()
    values = await asyncio.gather(*(one(a) for a in endpoints.values()))
    return (began + time.perf_counter()) / 2, dict(zip(endpoints, values, strict=True))


async def send(
    session: aiohttp.ClientSession, p: Planned, spec: dict[str, Any], t0: float
) -> list[Any]:
    """Send one request; return [status, ttft_s, e2e_s, region, endpoint, error]."""
    body = {
        "model": p.model,
        "messages": [{"role": "user", "content": prompt_text(*p.words)}],
        "max_tokens": p.output,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {spec['token']}", "X-Forwarded-For": p.ip}
    if spec.get("strategy"):
        headers["x-trafficmgr-strategy"] = spec["strategy"]
    start = time.perf_counter()
    ttft: float | None = None
    try:
        async with session.post(p.url, json=body, headers=headers) as r:
            region = r.headers.get("x-trafficmgr-region", p.region)
            endpoint = r.headers.get("x-trafficmgr-endpoint")
            if r.status != 200:
                text = (await r.read())[:200].decode(errors="replace")
                return [r.status, None, None, region, endpoint, text]
            async for line in r.content:
                if not line.startswith(b"data:"):
                    continue
                if line.startswith(b'data: {"error"'):
                    return [200, ttft, None, region, endpoint, line[:200].decode()]
                if line.startswith(b"data: [DONE]"):
                    return [200, ttft, time.perf_counter() - start, region, endpoint, None]
                if ttft is None:
                    ttft = time.perf_counter() - start
            return [200, ttft, None, region, endpoint, "stream ended without [DONE]"]
    except Exception as exc:  # a failed request is a result, not a crash
        return [0, ttft, None, p.region, None, f"{type(exc).__name__}: {exc}"[:200]]


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    todo = plan(spec)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=spec.get("request_timeout_s", 900))
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        opened, before = await scrape(session, spec["endpoints"])
        t0 = time.perf_counter()
        tasks, late = [], []
        for p in todo:
            delay = t0 + p.at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            late.append(time.perf_counter() - t0 - p.at)  # this process's own lag
            tasks.append(asyncio.ensure_future(send(session, p, spec, t0)))
        closed, after = await scrape(session, spec["endpoints"])
        window = closed - opened
        results = await asyncio.gather(*tasks)
    late.sort()
    return {
        "window_s": window,
        "send_lag_s": late[-1],  # the latest a request left after its time
        "send_lag_p99_s": late[int(0.99 * (len(late) - 1))],
        "counters_before": before,
        "counters_after": after,
        "requests": [
            [p.country, list(p.allowed) if p.allowed is not None else None, *res]
            for p, res in zip(todo, results, strict=True)
        ],
    }


def main(argv: Sequence[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    try:
        import uvloop

        result = uvloop.run(run(spec))
    except ImportError:
        result = asyncio.run(run(spec))
    Path(spec["out"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
