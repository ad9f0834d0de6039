"""Time the routing engine on a large synthetic fleet.

50 regions x 2,000 endpoints x 250 client zones x 4 models: compile_table (cold, warm, with
an identical previous table, and with the previous tick's table from other heartbeats, the
control loop's case, where spillover and the shift limit have work to do), evaluate_fleet
over 2,000 heartbeats, and diff_tables between two ticks' tables.
Run: .venv/bin/python -m bench.engine.table [--runs 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Mapping

from bench.suite import write_json
from trafficmgr.routing.countries import CENTROID_OF, CONTINENT_OF
from trafficmgr.routing.failover import RegionMachine, evaluate_fleet
from trafficmgr.routing.table import clear_distance_cache, compile_table, diff_tables
from trafficmgr.routing.types import (
    Endpoint,
    FailoverPolicy,
    Fleet,
    GeoPoint,
    GpuProfile,
    GpuSample,
    Heartbeat,
    OutputHistogram,
    ProbeSample,
    Region,
    RegionStatus,
    ResidencyMode,
    ResidencyRule,
    ServerSample,
)

MODELS = ("llama-3-70b", "llama-3-8b", "mixtral-8x7b", "qwen-2-72b")
PROFILES = {
    "H100": GpuProfile("H100", 12000, 2400, 64),
    "A100": GpuProfile("A100", 6000, 1300, 48),
    "L4": GpuProfile("L4", 1500, 350, 16),
}
REGION_COUNTRIES = (
    "IE",
    "DE",
    "FR",
    "GB",
    "NL",
    "SE",
    "PL",
    "IT",
    "ES",
    "CH",
    "US",
    "US",
    "US",
    "US",
    "CA",
    "CA",
    "MX",
    "BR",
    "AR",
    "CL",
    "CO",
    "JP",
    "JP",
    "KR",
    "SG",
    "SG",
    "IN",
    "IN",
    "AU",
    "NZ",
    "ZA",
    "NG",
    "EG",
    "KE",
    "AE",
    "SA",
    "IL",
    "TR",
    "RU",
    "KZ",
    "CN",
    "HK",
    "TW",
    "ID",
    "TH",
    "VN",
    "PH",
    "MY",
    "PK",
    "BD",
)


def build_fleet(n_regions: int = 50, n_endpoints: int = 2000, seed: int = 7) -> Fleet:
    """Build a synthetic fleet: regions near country centroids, endpoints spread evenly."""
    rng = random.Random(seed)
    regions = []
    per_region = n_endpoints // n_regions
    for i in range(n_regions):
        country = REGION_COUNTRIES[i % len(REGION_COUNTRIES)]
        lat, lon = CENTROID_OF[country]
        name = f"r{i:02d}-{country.lower()}"
        endpoints = tuple(
            Endpoint(
                name=f"{name}-e{j:03d}",
                region=name,
                address=f"10.{i}.{j // 250}.{j % 250 + 1}:8000",
                gpu=rng.choice(tuple(PROFILES)),
                gpus=rng.choice((1, 2, 4, 8)),
                models=tuple(rng.sample(MODELS, rng.randint(1, 3))),
            )
            for j in range(per_region)
        )
        regions.append(
            Region(
                name=name,
                country=country,
                continent=CONTINENT_OF[country],
                location=GeoPoint(lat + rng.uniform(-2, 2), lon + rng.uniform(-2, 2)),
                addresses=(f"192.0.2.{i + 1}",),
                endpoints=endpoints,
                priority=1 + i % 3,
            )
        )
    eu = tuple(r.name for r in regions if r.continent == "EU")
    residency = (
        ResidencyRule("gdpr", frozenset(), frozenset({"EU"}), eu, ResidencyMode.STRICT),
        ResidencyRule(
            "sg-pref",
            frozenset({"SG", "MY"}),
            frozenset(),
            tuple(r.name for r in regions if r.country == "SG"),
            ResidencyMode.PREFERRED,
        ),
    )
    policy = FailoverPolicy(max_shift_per_tick=0.2)
    return Fleet("bench.example.test", 10, PROFILES, tuple(regions), residency, policy)


OUTPUT_BOUNDS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)


def output_histogram(model: str, rng: random.Random) -> OutputHistogram:
    """A vLLM server's cumulative histogram of output tokens, as agents report it."""
    counts, total = [], 0
    for share in (0.002, 0.006, 0.03, 0.1, 0.22, 0.28, 0.29, 0.05, 0.01, 0.001):
        total += int(share * rng.randint(50_000, 150_000))
        counts.append(total)
    return OutputHistogram(model, OUTPUT_BOUNDS, tuple(counts), total + rng.randint(0, 5))


def heartbeats(fleet: Fleet, now: float, seed: int = 11) -> dict[str, Heartbeat]:
    """Return one heartbeat per endpoint: mostly healthy, some stale, failing or saturated."""
    rng = random.Random(seed)
    out = {}
    for i, e in enumerate(fleet.endpoints()):
        roll = rng.random()
        age = 10.0 if roll < 0.03 else rng.uniform(0, 1)
        gpus = tuple(
            GpuSample(
                k,
                f"GPU-{i}-{k}",
                e.gpu,
                rng.uniform(20, 99),
                40000,
                81920,
                temp_c=rng.uniform(40, 92),
                throttle_reasons=("sw_thermal_slowdown",) if roll > 0.97 else (),
            )
            for k in range(e.gpus)
        )
        server = ServerSample(
            "vllm",
            rng.randint(0, 60),
            rng.randint(0, 20),
            rng.uniform(0.1, 0.99),
            models_loaded=e.models,
            output_tokens=tuple(output_histogram(m, rng) for m in e.models),
        )
        out[e.name] = Heartbeat(
            e.name, 1, now - age, now - age, gpus, server, ProbeSample(roll > 0.01, 12.0)
        )
    return out


def timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    """Return wall-clock median/p99/min and CPU-time median in ms over ``runs`` calls.

    CPU time is this process's own, so it stays honest on a machine shared with other work,
    where wall time also counts the waits for a core.
    """
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    wall.sort()
    p99 = wall[min(len(wall) - 1, round(0.99 * (len(wall) - 1)))]
    return {
        "median_ms": round(statistics.median(wall), 2),
        "p99_ms": round(p99, 2),
        "min_ms": round(wall[0], 2),
        "cpu_median_ms": round(statistics.median(cpu), 2),
        "runs": runs,
    }


def cold(fleet: Fleet, statuses: Mapping[str, RegionStatus], now: float, zones: list[str]) -> None:
    """Compile with an empty RTT cache, as the first compile after a start does."""
    clear_distance_cache()
    compile_table(fleet, statuses, now, zones=zones)


def main() -> None:
    """Build the fleet, run the timings, print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    now = 1_700_000_000.0
    fleet = build_fleet()
    zones = sorted(CONTINENT_OF)
    beats = heartbeats(fleet, now)
    machines: dict[str, RegionMachine] = {}
    evaluation = evaluate_fleet(fleet, beats, machines, now)
    evaluation = evaluate_fleet(fleet, beats, evaluation.machines, now + 1)
    statuses = evaluation.statuses
    first = compile_table(fleet, statuses, now, zones=zones)
    earlier_beats = heartbeats(fleet, now - 1, seed=12)
    earlier_statuses = evaluate_fleet(fleet, earlier_beats, {}, now - 1).statuses
    earlier = compile_table(fleet, earlier_statuses, now - 1, zones=zones)
    tick = compile_table(fleet, statuses, now, previous=earlier, zones=zones)
    lists = sum(len(models) for models in first.zones.values())
    figures = {
        "fleet": {
            "regions": len(fleet.regions),
            "endpoints": len(fleet.endpoints()),
            "zones": len(first.zones),
            "models": len(fleet.models()),
            "lists": lists,
            "lists_changed_per_tick": len(diff_tables(earlier, tick).lists),
        },
        "compile_table": timed(lambda: compile_table(fleet, statuses, now, zones=zones), args.runs),
        "compile_table_cold_rtt_cache": timed(lambda: cold(fleet, statuses, now, zones), args.runs),
        "compile_table_with_previous": timed(
            lambda: compile_table(fleet, statuses, now, previous=first, zones=zones), args.runs
        ),
        "compile_table_with_previous_tick": timed(
            lambda: compile_table(fleet, statuses, now, previous=earlier, zones=zones), args.runs
        ),
        "diff_tables": timed(lambda: diff_tables(earlier, tick), args.runs),
        "evaluate_fleet": timed(
            lambda: evaluate_fleet(fleet, beats, evaluation.machines, now + 2), args.runs
        ),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
