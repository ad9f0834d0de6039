"""Command line of the simulator: ``python -m trafficmgr.sim`` (and ``manage.py simulate``).

``run_cli(argv)`` parses, runs and writes the JSON (and the plot); it returns the exit
status: 0 on success, 2 on bad input (fleet, trace, policies, faults), with the reason on
stderr. A progress bar goes to stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from trafficmgr.fleetfile import FleetError, load_fleet_file
from trafficmgr.sim.faults import parse_fault
from trafficmgr.sim.metrics import Slo
from trafficmgr.sim.run import DEFAULT_POLICIES, POLICIES, simulate
from trafficmgr.sim.traces import TraceError, read_trace


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser (shared with the Django management command)."""
    p = argparse.ArgumentParser(
        prog="python -m trafficmgr.sim",
        description="Replay an LLM request trace against a fleet under several routing "
        "policies and compare latency, throughput, utilisation and residency.",
    )
    p.add_argument("--fleet", required=True, help="fleet YAML file (docs/architecture.md §4)")
    p.add_argument(
        "--trace",
        required=True,
        help="Azure CSV, Mooncake JSONL or BurstGPT CSV (detected by content)",
    )
    p.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help=f"comma-separated, from: {', '.join(POLICIES)}",
    )
    p.add_argument(
        "--load",
        type=float,
        default=0.8,
        help="offered load as a fraction of the fleet's estimated capacity "
        "(arrival times are rescaled); 0 keeps the trace's own times",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds clients, models and choices")
    p.add_argument("--json", required=True, dest="json_out", help="output JSON file, - for stdout")
    p.add_argument("--plot", help="write latency CDFs and per-endpoint utilisation (PNG)")
    _add_model_options(p)
    return p


def _add_model_options(p: argparse.ArgumentParser) -> None:
    """Add the options that shape the simulated world (faults, resolvers, SLO, caches)."""
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="TARGET@START-END",
        help="take a region or endpoint down (simulated seconds); repeatable",
    )
    p.add_argument(
        "--resolvers",
        type=int,
        default=32,
        help="DNS resolvers per client country, each caching for the fleet's ttl",
    )
    p.add_argument(
        "--batch-share", type=float, default=0.0, help="share of requests sent with batch priority"
    )
    p.add_argument("--slo-ttft", type=float, default=2.0, help="goodput SLO: TTFT, seconds")
    p.add_argument(
        "--slo-tpot",
        type=float,
        default=0.1,
        help="goodput SLO: seconds per output token after the first",
    )
    p.add_argument("--no-prefix-cache", action="store_true", help="endpoints keep no prefix cache")
    p.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="gateway processes; each picks from its own requests in flight and the "
        "heartbeats of the last tick, as in production (requests dealt round robin)",
    )
    p.add_argument(
        "--omniscient",
        action="store_true",
        help="upper bound: every picker sees every server's exact state at the pick "
        "(no deployment has this view; --gateways is ignored)",
    )
    p.add_argument(
        "--strict-trace",
        action="store_true",
        help="unsorted trace timestamps are an error instead of a warning",
    )


class ProgressBar:
    """A one-line progress bar per policy on a terminal."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream, self.width = stream, width
        self.last = 0.0
        self.current = ""

    def __call__(self, name: str, fraction: float) -> None:
        now = time.monotonic()
        if name == self.current and now - self.last < 0.2 and fraction < 1.0:
            return
        self.current, self.last = name, now
        filled = int(self.width * fraction)
        self.stream.write(
            f"\r{name:<24} [{'#' * filled}{'.' * (self.width - filled)}] {fraction:4.0%}"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.current:
            self.stream.write("\n")


def run_cli(
    argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run the simulator command line; return the exit status."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        options = _options(args)
        fleet = load_fleet_file(args.fleet)
        trace = read_trace(args.trace, strict=args.strict_trace)
    except (FleetError, TraceError, ValueError, OSError) as exc:
        err.write(f"error: {exc}\n")
        return 2
    for warning in trace.warnings:
        err.write(f"warning: {args.trace}: {warning}\n")
    bar = ProgressBar(err) if err.isatty() else None
    try:
        result = simulate(fleet, trace, progress=bar, **options)
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return 2
    finally:
        if bar is not None:
            bar.close()
    text = json.dumps(result.document, indent=2, allow_nan=False)
    if args.json_out == "-":
        out.write(text + "\n")
    else:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        out.write(summary_table(result.document))
    if args.plot:
        from trafficmgr.sim.plot import write_plot

        write_plot(result.outcomes, args.plot)
    return 0


def _options(args: argparse.Namespace) -> dict[str, Any]:
    if not 0 <= args.load <= 10:
        raise ValueError(f"--load {args.load}: expected 0 (trace times) to 10")
    if not 0 <= args.batch_share <= 1:
        raise ValueError("--batch-share must be within 0..1")
    if args.resolvers < 1:
        raise ValueError("--resolvers must be at least 1")
    if args.gateways < 1:
        raise ValueError(f"--gateways {args.gateways}: expected at least 1")
    return {
        "policies": [p.strip() for p in args.policies.split(",") if p.strip()],
        "load": args.load or None,
        "seed": args.seed,
        "faults": tuple(parse_fault(f) for f in args.fault),
        "resolvers": args.resolvers,
        "batch_share": args.batch_share,
        "slo": Slo(args.slo_ttft, args.slo_tpot),
        "prefix_cache": not args.no_prefix_cache,
        "gateways": args.gateways,
        "omniscient": args.omniscient,
    }


def summary_table(document: dict[str, Any]) -> str:
    """Return a short text table of the main figures."""
    lines = [
        f"{'policy':<24}{'done':>7}{'rej':>6}{'p50 ms':>9}{'p99 ms':>10}"
        f"{'ttft p99':>10}{'util cov':>9}{'resid.':>7}"
    ]
    for name, p in document["policies"].items():
        lat, ttft = p["latency_ms"], p["ttft_ms"]
        lines.append(
            f"{name:<24}{p['completed']:>7}{p['rejected']:>6}{_f(lat['p50']):>9}"
            f"{_f(lat['p99']):>10}{_f(ttft['p99']):>10}{_f(p['util_cov'], 3):>9}"
            f"{p['residency_violations']:>7}"
        )
    return "\n".join(lines) + "\n"


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    raise SystemExit(run_cli())
