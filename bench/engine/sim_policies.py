"""Compare routing policies in the simulator: fleet x traces x loads, one table.

Run: .venv/bin/python -m bench.engine.sim_policies [--fleet examples/fleet.yaml]
         [--loads 0.6,0.8,0.9] [--traces A,B] [--region NAME] [--speed]
         [--gateways 1,4] [--shared] [--seeds 0,1,2] [--json OUT] [--omniscient]

The pickers see what production gives a gateway process: its own requests in flight and the
heartbeats of the last tick (``trafficmgr/sim/gateways.py``); ``--gateways 1,4`` runs each
cell once per count of gateway processes, each seeing its own share of the requests.
``--shared`` runs each count of gateway processes a second time with their state shared as
production shares it through Redis (``SharedModel``: published every 5 ms, merged one round
trip later, the same merge code); ``--seeds`` repeats every cell per seed; ``--json OUT`` writes
one row per cell (ai_aware's and the oracle's P99 and their ratio) with the command.
``--omniscient`` adds a run where every picker sees every server's exact state: the upper
bound the table was measured under before.

For each trace and load it prints, per policy, latency p50/p99, TTFT p99, the utilisation
spread three ways, rejected requests and residency violations, then ai_aware's P99 against
round_robin's, least_connections' and the oracle's, next to the targets (<= 0.4, <= 0.85,
<= 1.25), and its in-region CoV against <= 0.10. The spreads (trafficmgr/sim/metrics.py):
``cov all`` is the JSON's ``util_cov`` over every endpoint of the fleet, ``cov serving`` leaves
out endpoints that served nothing, ``cov region`` (``util_cov_region``) is the capacity-weighted
CoV inside each region, averaged over regions by the work they served: the part the in-region
picker decides, and what the target is held to. Each run then breaks ai_aware's and the
oracle's utilisation down by region, GPU type and region priority (mean/CoV), and splits the
fleet-wide variance into its between-region part (the global table's split) and its
within-region part (the picker's). ``--speed`` times a 19,000-request trace (the Azure trace
repeated back to back) through five policies. Other traces: ``examples/traces/
burstgpt_synthetic.csv`` (``python -m trafficmgr.sim.synthetic``); other fleets: ``--fleet
examples/fleet-homogeneous.yaml``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.suite import ROOT, write_json
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.routing.types import ClientShare, Fleet
from trafficmgr.sim.gateways import SharedModel
from trafficmgr.sim.metrics import coefficient_of_variation
from trafficmgr.sim.run import DEFAULT_POLICIES, RunResult, simulate
from trafficmgr.sim.traces import Trace, TraceRequest, read_trace

DATA = ROOT / "examples" / "traces"
TRACES = (
    str(DATA / "AzureLLMInferenceTrace_code.csv"),
    str(DATA / "mooncake_synthetic_trace.jsonl"),
)
TARGETS = {"round_robin": 0.4, "least_connections": 0.85, "oracle": 1.25}


def repeated(trace: Trace, n: int) -> Trace:
    """Return the trace replayed back to back until it holds ``n`` requests."""
    reqs: list[TraceRequest] = []
    gap = trace.duration_s / max(1, len(trace.requests) - 1)
    offset = 0.0
    while len(reqs) < n:
        reqs.extend(
            TraceRequest(r.at + offset, r.input_tokens, r.output_tokens, r.model, r.prefix_hashes)
            for r in trace.requests[: n - len(reqs)]
        )
        offset += trace.duration_s + gap
    return Trace(f"{trace.path} x{n / len(trace.requests):.2f}", trace.format, tuple(reqs))


def region_alone(fleet: Fleet, name: str) -> Fleet:
    """Return a fleet of one region whose clients are all in its country."""
    region = fleet.region(name)
    return replace(
        fleet,
        regions=(replace(region, priority=1),),
        residency=(),
        clients=(ClientShare(region.country, 1.0),),
    )


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def variance_split(utilisation: dict[str, float], region_of: dict[str, str]) -> float:
    """Return the share of the fleet-wide utilisation variance that lies between regions."""
    values = list(utilisation.values())
    mean = sum(values) / len(values)
    total = sum((v - mean) ** 2 for v in values)
    groups: dict[str, list[float]] = {}
    for name, util in utilisation.items():
        groups.setdefault(region_of[name], []).append(util)
    between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
    return between / total if total > 0 else 0.0


def print_breakdown(result: RunResult, fleet: Fleet) -> None:
    """Print ai_aware's and the oracle's utilisation by region, GPU type and priority."""
    gpu = {e.name: e.gpu for e in fleet.endpoints()}
    priority = {e.name: f"priority {r.priority}" for r in fleet.regions for e in r.endpoints}
    for name in ("ai_aware", "oracle"):
        outcome = result.outcomes.get(name)
        entry = result.document["policies"].get(name)
        if outcome is None or entry is None:
            continue
        regions = ", ".join(
            f"{r} {fmt(v['mean'], 2)}/{fmt(v['cov'], 2)}"
            for r, v in entry["util_by_region"].items()
        )
        parts = []
        for key in (gpu, priority):
            groups: dict[str, list[float]] = {}
            for endpoint, util in outcome.utilisation.items():
                groups.setdefault(key[endpoint], []).append(util)
            parts.append(
                ", ".join(
                    f"{g} {sum(v) / len(v):.2f}/{coefficient_of_variation(v):.2f}"
                    for g, v in sorted(groups.items())
                )
            )
        between = variance_split(outcome.utilisation, outcome.endpoint_region)
        print(f"  {name} util mean/CoV by region (capacity-weighted): {regions}")
        print(f"  {' ' * len(name)} by GPU: {parts[0]}; by priority: {parts[1]}")
        print(
            f"  {' ' * len(name)} fleet-wide variance: {between:.0%} between regions, "
            f"{1 - between:.0%} within"
        )


def print_run(doc: dict[str, Any], seconds: float) -> None:
    policies = doc["policies"]
    print(
        f"  {'policy':<24}{'p50 ms':>8}{'p99 ms':>9}{'ttft p99':>9}{'cov all':>8}"
        f"{'serving':>8}{'region':>8}{'util mean':>10}{'rejected':>9}{'resid.':>7}"
    )
    for name, p in policies.items():
        print(
            f"  {name:<24}{fmt(p['latency_ms']['p50']):>8}{fmt(p['latency_ms']['p99']):>9}"
            f"{fmt(p['ttft_ms']['p99']):>9}{fmt(p['util_cov'], 3):>8}"
            f"{fmt(p['util_cov_serving'], 3):>8}{fmt(p['util_cov_region'], 3):>8}"
            f"{fmt(p['util_mean'], 3):>10}{p['rejected']:>9}{p['residency_violations']:>7}"
        )
    ai = policies.get("ai_aware")
    if ai and ai["latency_ms"]["p99"]:
        parts = []
        for other, bar in TARGETS.items():
            if other in policies and policies[other]["latency_ms"]["p99"]:
                ratio = ai["latency_ms"]["p99"] / policies[other]["latency_ms"]["p99"]
                mark = "ok" if ratio <= bar else "MISS"
                parts.append(f"/{other} {ratio:.2f} (<= {bar}: {mark})")
        cov = ai["util_cov_region"]
        mark = "ok" if cov is not None and cov <= 0.10 else "MISS"
        parts.append(
            f"CoV in region {fmt(cov, 3)} (<= 0.10: {mark}; fleet-wide {fmt(ai['util_cov'], 3)})"
        )
        print("  ai_aware P99 " + ", ".join(parts))
    print(f"  ({seconds:.1f} s wall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="examples/fleet.yaml")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--loads", default="0.6,0.8,0.9")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--region",
        help="simulate this region alone, its clients local: "
        "isolates the in-region picker from the global level",
    )
    parser.add_argument(
        "--speed", action="store_true", help="only time 19,000 requests through the policies"
    )
    parser.add_argument(
        "--gateways", default="1", help="comma-separated counts of gateway processes"
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="also run each gateway count with the shared request-path state",
    )
    parser.add_argument("--seeds", help="comma-separated seeds (default: --seed)")
    parser.add_argument("--json", help="write one row per cell here")
    parser.add_argument(
        "--omniscient",
        action="store_true",
        help="also run the upper bound: pickers see every server's exact state",
    )
    args = parser.parse_args()
    fleet = load_fleet_file(args.fleet)
    if args.region:
        fleet = region_alone(fleet, args.region)
    policies = args.policies.split(",")
    views: list[tuple[str, dict[str, Any]]] = [
        (f"{n} gateway{'s' if n != 1 else ''}", {"gateways": n})
        for n in (int(x) for x in args.gateways.split(","))
    ]
    if args.shared:
        views = [
            v
            for label, view in views
            for v in ((label, view), (f"{label} shared", {**view, "shared": SharedModel()}))
        ]
    if args.omniscient:
        views.append(("omniscient (upper bound)", {"omniscient": True}))
    if args.speed:
        trace = repeated(read_trace(TRACES[0]), 19_000)
        t0 = time.perf_counter()
        result = simulate(fleet, trace, policies, load=0.8, seed=args.seed, **views[0][1])
        seconds = time.perf_counter() - t0
        print(f"{len(trace.requests)} requests x {len(policies)} policies: {seconds:.1f} s")
        print_run(result.document, seconds)
        return
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    rows: list[dict[str, Any]] = []
    for path in args.traces.split(","):
        trace = read_trace(path)
        for load in (float(x) for x in args.loads.split(",")):
            for seed in seeds:
                for label, view in views:
                    t0 = time.perf_counter()
                    result = simulate(fleet, trace, policies, load=load, seed=seed, **view)
                    print(
                        f"\n{Path(path).name}  load {load}  seed {seed}  {label}  "
                        f"({len(trace.requests)} requests, "
                        f"{result.document['trace']['simulated_duration_s']:.0f} s simulated)"
                    )
                    print_run(result.document, time.perf_counter() - t0)
                    print_breakdown(result, fleet)
                    rows.append(cell_row(Path(path).name, load, seed, label, view, result))
    if args.json:
        command = "python -m bench.engine.sim_policies " + " ".join(sys.argv[1:])
        write_json(args.json, {"command": command, "cells": rows}, indent=1)


def cell_row(
    trace: str, load: float, seed: int, label: str, view: dict[str, Any], result: RunResult
) -> dict[str, Any]:
    """Return one cell's figures: ai_aware's and the oracle's P99, and their ratio."""
    policies = result.document["policies"]
    p99 = {n: p["latency_ms"]["p99"] for n, p in policies.items()}
    ai, oracle = p99.get("ai_aware"), p99.get("oracle")
    return {
        "trace": trace,
        "load": load,
        "seed": seed,
        "view": label,
        "gateways": view.get("gateways"),
        "shared": "shared" in view,
        "omniscient": bool(view.get("omniscient")),
        "p99_ms": p99,
        "ai_aware_over_oracle": round(ai / oracle, 4) if ai and oracle else None,
    }


if __name__ == "__main__":
    main()
