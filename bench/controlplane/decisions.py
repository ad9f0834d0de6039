"""L7 decisions per second through the whole HTTP stack (``POST /api/v1/route``).

The distributed mode: the bench process publishes a table (one tick) and a child process
keeps 2 heartbeats per second per endpoint flowing into Redis, as agents would; the server
answers decisions from the published table and live endpoint loads. Requests mix client
addresses (GeoIP lookups) and client countries over the fleet's models, 100-8,000 prompt
tokens.

Run: .venv/bin/python -m bench.controlplane.decisions --redis-url redis://127.0.0.1:6379/13
     [--duration 10] [--concurrency 8] [--database-url postgres://...]
     [--server daphne|uvicorn] [--workers N] [--no-front] [--rate R] [--in-process N]
     [--completions ITEMS]
The Redis database given is the bench's own: its trafficmgr:* keys are deleted.
``--in-process N`` starts no server: it times N decisions through the ASGI application in
this process (no sockets): with the front, through Django, and Django called synchronously.

``--completions ITEMS`` measures completion-report ingest instead (``POST
/api/v1/route/completions``, ITEMS completions per report, each with 4 prefix hashes): reports/s
and their latency, then, in this process, what a web process pays to learn them: its first
look at a region (the replay of the stream's latest) and a rebuild reading new entries.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import time
from dataclasses import replace
from typing import Any

from bench.controlplane.http_load import (
    arguments,
    describe,
    load,
    prepare,
    report_in_process,
    serve,
    stop,
)
from bench.suite import free_port

IPS = (
    "81.2.69.142",
    "78.46.0.1",
    "8.8.8.8",
    "49.207.0.1",
    "1.0.16.1",
    "177.0.0.1",
    "5.39.0.1",
    "24.48.0.1",
    "101.0.0.1",
    "202.12.27.33",
)
COUNTRIES = ("US", "DE", "GB", "FR", "JP", "IN", "BR", "SG", "AU", "CA")


def completion_reports(fleet: Any, items: int, count: int = 64) -> list[bytes]:
    """``count`` report bodies of ``items`` completions each, over the fleet's endpoints."""
    rng = random.Random(2)
    endpoints = fleet.endpoints()
    bodies = []
    for _ in range(count):
        batch = []
        for _ in range(items):
            e = rng.choice(endpoints)
            batch.append(
                {
                    "endpoint": e.name,
                    "model": rng.choice(e.models),
                    "input_tokens": rng.randint(100, 8000),
                    "output_tokens": rng.randint(1, 2000),
                    "latency_ms": round(rng.uniform(100.0, 20_000.0), 1),
                    "prefix_hashes": [rng.getrandbits(63) for _ in range(4)],
                }
            )
        bodies.append(json.dumps({"completions": batch}).encode())
    return bodies


def learning_cost(fleet: Any, bodies: list[bytes]) -> None:
    """Time, in this process, a first read of the control plane (replaying every region's
    reported completions) and a read after a report."""
    from regions import hotstate
    from regions.decisions import completions
    from regions.decisions import route as decisions
    from regions.fleet import snapshot
    from trafficmgr.requestpath.learning import STREAM_PER_READ, STREAM_REPLAY

    view = snapshot.current()
    store = hotstate.get()
    stream = sum(len(store.completions(r.name, None, 10**6)) for r in fleet.regions)
    decisions.forget()
    core = decisions.core()
    t = time.perf_counter()
    core.maintain()
    first = time.perf_counter() - t
    for body in bodies[:4]:
        completions.report(body, view)
    t = time.perf_counter()
    core.maintain()
    again = time.perf_counter() - t
    print(
        f"learning (streams of {stream} in all): first read, replaying up to {STREAM_REPLAY} "
        f"per region, {first * 1000:.1f} ms; a read taking up to {STREAM_PER_READ} new per "
        f"region {again * 1000:.1f} ms (heartbeats and candidates included)"
    )


def main() -> None:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--completions", type=int, default=0, metavar="ITEMS")
    wanted, sys.argv[1:] = extra.parse_known_args()
    args = arguments(__doc__.splitlines()[0])
    args.redis_url = args.redis_url or os.environ.get("REDIS_URL")
    if not args.redis_url:
        raise SystemExit("--redis-url is needed: the bench and daphne share the hot state")
    env = prepare(args)
    from bench.engine.table import heartbeats
    from regions import hotstate
    from regions.access.issue import create_token
    from regions.fleet import snapshot
    from regions.loop import control

    store = hotstate.get()
    fleet = snapshot.current().fleet
    # The agents run in a process of their own: in this one they would take the load
    # generator's interpreter lock for ~70 ms per pass and show up as server latency.
    forking = multiprocessing.get_context("fork")
    stopping = forking.Event()

    def agents() -> None:
        seq = 1
        while not stopping.is_set():
            now = time.time()
            for hb in heartbeats(fleet, now, seed=seq % 7).values():
                store.put_heartbeat(replace(hb, seq=seq, sent_at=now, received_at=now), 0)
            seq += 1
            stopping.wait(0.5)

    feeder = forking.Process(target=agents, daemon=True)
    feeder.start()
    time.sleep(1.0)
    control.run_tick(time.time())
    _, secret = create_token("bench-gateway", "viewer")
    models = fleet.models()
    rng = random.Random(1)
    reports = completion_reports(fleet, wanted.completions) if wanted.completions else []

    def make(worker: int, i: int) -> tuple[str, bytes, dict[str, str]]:
        if reports:
            headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
            return "/api/v1/route/completions", reports[(worker * 7919 + i) % len(reports)], headers
        body: dict[str, object] = {
            "model": rng.choice(models),
            "input_tokens": rng.randint(100, 8000),
            "max_output_tokens": rng.randint(64, 1024),
            "priority": "interactive" if i % 5 else "batch",
        }
        if i % 2:
            body["client_ip"] = rng.choice(IPS)
        else:
            body["client_country"] = rng.choice(COUNTRIES)
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        return "/api/v1/route", json.dumps(body).encode(), headers

    if args.in_process:
        try:
            report_in_process(
                "completion reports" if reports else "decisions", make, args.in_process
            )
        finally:
            stopping.set()
            feeder.join(5)
            store.reset()
        return
    port = free_port()
    server = serve(env, port, args)
    try:
        results = load(port, make, args.concurrency, args.duration, server, args.rate)
        if reports:
            learning_cost(fleet, reports)
    finally:
        stop(server)
        stopping.set()
        feeder.join(5)
        store.reset()
    what = f"completion reports of {wanted.completions}" if reports else "decisions"
    print(
        f"{what} (redis hot state, {env['DATABASE_URL'].split(':')[0]}, {describe(args)}, "
        f"{len(fleet.regions)} regions, "
        f"{len(fleet.endpoints())} endpoints; 503 = no allowed capacity)"
    )
    results.report("completion reports" if reports else "decisions")
    if reports:
        n = len(results.latencies)
        print(f"completions: {n * wanted.completions / results.elapsed:,.0f}/s")


if __name__ == "__main__":
    main()
