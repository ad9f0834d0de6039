"""Measure one per-request pick among many endpoints, in process; print p50/p99 per strategy.

Run: .venv/bin/python -m bench.engine.pick [--endpoints 1000] [--picks 20000]

The candidates are a tuple refreshed every ``--refresh`` picks, as a gateway refreshes its
snapshot on each load report. Two ways to use ai_aware: a gateway calls ``prepare()`` on
each new snapshot (grouping by model and costing every endpoint, off the request path; its
time is the "per snapshot" column), or lets picks cost endpoints lazily (the first pick on a
new snapshot pays the grouping). Each row is the best of ``--repeat`` runs by p99: other
processes on the machine only ever add time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from trafficmgr.routing.estimator import OutputLengthEstimator
from trafficmgr.routing.picker import AiAwarePicker, EndpointLoad, make_picker
from trafficmgr.routing.types import ClientLocation, Endpoint, GpuProfile, Priority, Request

PROFILES = (
    GpuProfile("H100", 12000, 2400, 64),
    GpuProfile("A100", 6000, 1300, 48),
    GpuProfile("L4", 1500, 350, 16),
)
MODELS = ("llama-3-70b", "llama-3-8b", "mixtral-8x7b", "qwen-2-72b")


def make_loads(n: int, rng: random.Random) -> tuple[EndpointLoad, ...]:
    """Return ``n`` endpoint loads with mixed GPUs, models, load and cached prefixes."""
    loads = []
    for i in range(n):
        profile = PROFILES[i % len(PROFILES)]
        models = tuple(m for m in MODELS if rng.random() < 0.6) or (MODELS[0],)
        endpoint = Endpoint(
            f"ep-{i}",
            "bench",
            f"10.0.{i // 250}.{i % 250}:8000",
            profile.name,
            rng.choice((1, 2, 4, 8)),
            models,
        )
        running = rng.randrange(0, 40)
        loads.append(
            EndpointLoad(
                endpoint,
                profile,
                healthy=rng.random() > 0.02,
                running=running,
                waiting=rng.randrange(0, 5),
                outstanding_prefill_tokens=rng.random() * 20000,
                outstanding_decode_tokens=running * 150 * rng.random(),
                kv_cache_usage=rng.random(),
                gpu_util=rng.random(),
                latency_ewma_ms=rng.random() * 2000,
                cached_prefixes=frozenset(rng.randrange(0, 5000) for _ in range(20)),
            )
        )
    return tuple(loads)


def make_requests(n: int, rng: random.Random) -> list[Request]:
    client = ClientLocation("DE", "EU")
    out = []
    for _ in range(n):
        start = rng.randrange(0, 5000)
        out.append(
            Request(
                rng.choice(MODELS),
                client,
                rng.randrange(50, 8000),
                512,
                Priority.BATCH if rng.random() < 0.2 else Priority.INTERACTIVE,
                tuple(range(start, start + rng.randrange(0, 16))),
            )
        )
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench(
    strategy: str,
    loads: tuple[EndpointLoad, ...],
    requests: list[Request],
    refresh: int,
    prepare: bool,
) -> tuple[list[float], list[float]]:
    """Return per-pick times (µs) and per-snapshot preparation or first-pick times (µs)."""
    estimator = OutputLengthEstimator()
    picker = make_picker(strategy, seed=1, estimator=estimator)
    # Completions as a gateway reports them: output lengths by prompt size and prefix, and
    # latencies, so ai_aware balances within the tail (its full path) from the first pick.
    warm = random.Random(7)
    for k in range(2000):
        picker.observe(
            MODELS[k % len(MODELS)],
            warm.choice((10, 50, 120, 300, 40)),
            input_tokens=warm.randrange(50, 8000),
            prefix_hashes=(warm.randrange(0, 5000),),
            latency_s=warm.uniform(0.2, 4.0),
        )
    picks: list[float] = []
    snapshots: list[float] = []
    snapshot = loads
    clock = time.perf_counter
    for k, request in enumerate(requests):
        first = k % refresh == 0
        if first:
            snapshot = tuple(list(loads))  # a new tuple object: nothing cached for it
            if prepare and isinstance(picker, AiAwarePicker):
                t0 = clock()
                picker.prepare(snapshot)
                snapshots.append((clock() - t0) * 1e6)
        t0 = clock()
        picker.pick(request, snapshot, k * 0.001)
        dt = (clock() - t0) * 1e6
        if first and not prepare:
            snapshots.append(dt)
        else:
            picks.append(dt)
    return picks, snapshots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--picks", type=int, default=20000)
    parser.add_argument("--refresh", type=int, default=200, help="picks per snapshot (load report)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="measure this many times, report the run with the lowest p99 "
        "(like timeit's best-of: other processes only add time)",
    )
    parser.add_argument(
        "--strategies", default="ai_aware,least_outstanding_work,least_connections,round_robin"
    )
    args = parser.parse_args()
    rng = random.Random(7)
    loads = make_loads(args.endpoints, rng)
    requests = make_requests(args.picks, rng)
    print(
        f"{args.endpoints} endpoints, {args.picks} picks, snapshot refreshed every "
        f"{args.refresh} picks; times in µs"
    )
    print(f"{'strategy':<34}{'p50':>8}{'p99':>8}{'mean':>8}{'per snapshot p50':>18}")
    rows = [(name, False) for name in args.strategies.split(",")]
    rows.insert(1, ("ai_aware", True))
    for name, prepare in rows:
        runs = [bench(name, loads, requests, args.refresh, prepare) for _ in range(args.repeat)]
        picks, snapshots = min(runs, key=lambda run: percentile(run[0], 0.99))
        label = f"{name} (prepared snapshot)" if prepare else name
        print(
            f"{label:<34}{percentile(picks, 0.5):>8.1f}{percentile(picks, 0.99):>8.1f}"
            f"{statistics.fmean(picks):>8.1f}{percentile(snapshots, 0.5):>18.1f}"
        )
    print("per snapshot: prepare() for the prepared row, else the first pick on a new snapshot")


if __name__ == "__main__":
    main()
