"""Run several policies over one fleet and trace; build the output document.

The document's shape is a contract: docs/architecture.md §4.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trafficmgr.routing.picker import STRATEGIES
from trafficmgr.routing.types import Fleet
from trafficmgr.sim.des import Outcome, Simulation
from trafficmgr.sim.faults import Fault, check_faults
from trafficmgr.sim.gateways import SharedModel
from trafficmgr.sim.metrics import DEFAULT_SLO, Slo, summarise
from trafficmgr.sim.policies import ORACLE, make_policy
from trafficmgr.sim.traces import Trace
from trafficmgr.sim.workload import Workload, build_workload

POLICIES: tuple[str, ...] = (*STRATEGIES, ORACLE)
DEFAULT_POLICIES = (
    "round_robin",
    "least_connections",
    "least_outstanding_work",
    "ai_aware",
    ORACLE,
)


@dataclass
class RunResult:
    document: dict[str, Any]  # the output JSON
    outcomes: dict[str, Outcome]  # per policy, for plots and tests
    workload: Workload


def check_policies(names: Sequence[str]) -> tuple[str, ...]:
    """Return the names, or raise ValueError naming the unknown ones and the known ones."""
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ValueError(
            f"unknown policies {', '.join(unknown) or '(none given)'} "
            f"(known: {', '.join(POLICIES)})"
        )
    return tuple(dict.fromkeys(names))


def simulate(
    fleet: Fleet,
    trace: Trace,
    policies: Sequence[str],
    *,
    load: float | None = 0.8,
    seed: int = 0,
    faults: tuple[Fault, ...] = (),
    resolvers: int = 32,
    batch_share: float = 0.0,
    slo: Slo = DEFAULT_SLO,
    prefix_cache: bool = True,
    progress: Callable[[str, float], None] | None = None,
    gateways: int = 1,
    omniscient: bool = False,
    shared: SharedModel | None = None,
) -> RunResult:
    """Simulate every policy over the same workload and summarise them.

    ``gateways``: gateway processes, each picking from what production gives it (its own
    requests in flight and the heartbeats of the last tick); ``omniscient``: every picker
    sees every server's exact state instead, an upper bound (``sim.gateways``); ``shared``:
    the gateways share their state as production does through Redis (``SharedModel``).
    """
    names = check_policies(policies)
    if gateways < 1:
        raise ValueError(f"gateways: expected at least 1, got {gateways}")
    check_faults(fleet, faults)
    workload = build_workload(fleet, trace, load, seed, resolvers, batch_share)
    outcomes: dict[str, Outcome] = {}
    entries: dict[str, Any] = {}
    for name in names:
        report = None if progress is None else _bind(progress, name)
        sim = Simulation(
            fleet,
            workload,
            make_policy(name, seed),
            seed=seed,
            faults=faults,
            prefix_cache=prefix_cache,
            progress=report,
            gateways=gateways,
            omniscient=omniscient,
            shared=shared,
        )
        outcomes[name] = sim.run()
        entries[name] = summarise(outcomes[name], workload, slo)
    document = {
        "load": round(load if load is not None else workload.load, 4),
        "trace": trace_summary(trace, workload, seed, faults)
        | {"view": view_summary(fleet, gateways, omniscient, shared)},
        "policies": entries,
    }
    return RunResult(document, outcomes, workload)


def view_summary(
    fleet: Fleet, gateways: int, omniscient: bool, shared: SharedModel | None = None
) -> dict[str, Any]:
    """Say what the pickers were shown: gateway processes' own view, or the upper bound."""
    if omniscient:
        return {"kind": "omniscient", "note": "every server's exact state: an upper bound"}
    view: dict[str, Any] = {
        "kind": "gateways",
        "gateways": gateways,
        "heartbeat_interval_s": fleet.failover.heartbeat_interval_s,
    }
    if shared is not None:
        view["shared"] = {
            "interval_s": shared.interval_s,
            "rtt_s": shared.rtt_s,
            "max_staleness_s": shared.max_staleness_s,
        }
    return view


def trace_summary(
    trace: Trace, workload: Workload, seed: int, faults: tuple[Fault, ...]
) -> dict[str, Any]:
    """Describe the trace and how it was replayed."""
    reqs = trace.requests
    return {
        "path": trace.path,
        "format": trace.format,
        "requests": len(reqs),
        "duration_s": round(trace.duration_s, 3),
        "simulated_duration_s": round(trace.duration_s * workload.time_scale, 3),
        "time_scale": round(workload.time_scale, 6),
        "capacity_rps": round(workload.capacity_rps, 3),
        "offered_rps": round(workload.offered_rps, 3),
        "mean_input_tokens": round(sum(r.input_tokens for r in reqs) / len(reqs), 1),
        "mean_output_tokens": round(sum(r.output_tokens for r in reqs) / len(reqs), 1),
        "model_shares": {m: round(s, 4) for m, s in workload.model_shares.items()},
        "seed": seed,
        "faults": [str(f) for f in faults],
        "warnings": list(trace.warnings),
    }


def _bind(progress: Callable[[str, float], None], name: str) -> Callable[[float], None]:
    return lambda fraction: progress(name, fraction)
