"""Compare this project's GeoDNS server with PowerDNS (geoip backend) and gdnsd (geoip plugin).

    .venv/bin/python -m bench.dns.geodns [--duration 20] [--latency-seconds 10] [--rounds 1]
        [--workers 1,2] [--threads 1] [--servers trafficmgr,powerdns,gdnsd]
        [--swap-every 1 [--swap-moves 0.25] [--base-root DIR] [--rate QPS]]

From one fleet (``examples/fleet.yaml``) it compiles the answers every server must give (same
zone, names, client zones and region addresses; ``plan``) and writes PowerDNS's and gdnsd's
configurations from it (``competitors``). Then, one server at a time (ours first, then with
each ``--workers`` count, then PowerDNS and gdnsd with ``--threads`` UDP threads in their one
process), it starts the server alone on a free loopback port (rate limiting off for ours;
the others have none), checks with dig that MaxMind's test addresses get the right region
with ECS and without (``verify``), sends the query file once (the first pass: every query
new to the server, its caches cold), loads it with dnsperf for ``--duration`` seconds
(``--rounds`` times, each with a fresh start; the median counts), and then, every round, at
half our single-process peak rate with every answer timed, for p50/p99 (medians of the rounds,
and the p99 range), noting how long the server waited for a core meanwhile. The same query file
and concurrency for all: A and AAAA for every name, 85 % with an ECS option spread over the
test database's networks and over prefixes it does not know (``queries``).

With ``--swap-every S`` our server follows a table file that is rewritten with a new table
version every S seconds while it is loaded and timed (``swaps``: the first swap as each run
starts), which is what the control loop does to it in production; ``--swap-moves`` is the
share of the table's lists that route differently in each version. ``--base-root DIR`` also
runs our server from another tree (a copy taken before a change, say) as ``base``, in the same
rounds and under the same swaps, for a before/after comparison; ``--rate`` fixes the latency
runs' rate instead of half our first peak (so that both are timed at one rate).

It prints a Markdown table with each server's rate as a ratio of PowerDNS's and gdnsd's in
the same run, and whether our targets are met. It installs nothing: when a tool is missing
it names the Debian package to install and exits with status 2; a wrong geo answer makes the
exit status 1.

Everything shares the machine's cores with dnsperf (and with whatever else runs), so the
absolute rates move from run to run; the ratios of one run are the figures to compare. The
same goes for the tail: a server that waits for a core while datagrams arrive answers them
late whatever it does, so gdnsd's p99 at the same rate (and each server's off-core time)
tells a run whose tail is the machine's from one whose tail is the server's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.dns.geodns import servers
from bench.dns.geodns.perf import (
    CLIENTS,
    IN_FLIGHT,
    PerfResult,
    run_cpu_s,
    run_dnsperf,
    run_queue_wait_s,
)
from bench.dns.geodns.plan import Plan, make_plan
from bench.dns.geodns.queries import QueryMix, make_queries, write_binary
from bench.dns.geodns.swaps import TableSwaps
from bench.dns.geodns.verify import verify
from bench.suite import ROOT

FLEET = ROOT / "examples" / "fleet.yaml"
DATABASES = (
    ROOT.parent / "shared" / "data" / "geoip" / "GeoIP2-City-Test.mmdb",
    ROOT / "tests" / "data" / "geoip" / "GeoIP2-City-Test.mmdb",
)
OURS = "trafficmgr"
LABELS = {
    "trafficmgr": "trafficmgr",
    "base": "trafficmgr (base tree)",
    "powerdns": "PowerDNS geoip",
    "gdnsd": "gdnsd geoip",
}
FOLLOWS_TABLE = ("trafficmgr", "base")
TARGET_LATENCY_MS = 2.0

Run = tuple[str, int]  # server, worker processes (ours only)


def _label(name: str, workers: int) -> str:
    return LABELS[name] + (f" --workers {workers}" if workers > 1 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per throughput run")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="0: no latency runs")
    parser.add_argument("--rounds", type=int, default=1, help="throughput runs per server (median)")
    parser.add_argument("--queries", type=int, default=20_000, help="queries in the file")
    parser.add_argument("--prefixes", type=int, default=3000, help="unknown client prefixes")
    parser.add_argument("--workers", default="1", help="our server's worker counts, e.g. 1,2")
    parser.add_argument("--servers", default="trafficmgr,powerdns,gdnsd")
    parser.add_argument(
        "--threads", type=int, default=1, help="UDP threads of PowerDNS and gdnsd (one process)"
    )
    parser.add_argument("--fleet", type=Path, default=FLEET)
    parser.add_argument(
        "--swap-every", type=float, default=0.0, help="seconds between table swaps (0: none)"
    )
    parser.add_argument(
        "--swap-moves", type=float, default=0.0, help="share of lists each swap changes"
    )
    parser.add_argument("--base-root", type=Path, help="also run our server from this tree")
    parser.add_argument("--rate", type=float, default=0.0, help="latency runs' qps (0: half)")
    parser.add_argument(
        "--geoip-db", type=Path, default=next((d for d in DATABASES if d.exists()), None)
    )
    args = parser.parse_args()
    names = [s.strip() for s in args.servers.split(",") if s.strip()]
    if args.base_root is not None and "base" not in names:
        names.insert(names.index(OURS) + 1 if OURS in names else 0, "base")
    if unknown := [n for n in names if n not in LABELS]:
        parser.error(f"unknown servers: {', '.join(unknown)}")
    missing = servers.missing_packages([n for n in names if n != "base"])
    if missing:
        print(f"missing: apt-get install {' '.join(sorted(set(missing)))}", file=sys.stderr)
        return 2
    if args.geoip_db is None or not args.geoip_db.exists():
        print("missing: MaxMind's GeoIP2-City-Test.mmdb (tests/data/geoip/)", file=sys.stderr)
        return 2
    plan = make_plan(args.fleet)
    mix = QueryMix(
        names=tuple(f"{label}.{plan.zone}" for label in plan.names),
        count=args.queries,
        unknown_prefixes=args.prefixes,
    )
    queries, ecs = make_queries(mix, args.geoip_db)
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    ours = [n for n in names if n in FOLLOWS_TABLE]
    runs: list[Run] = [(n, w) for w in counts for n in ours]  # ours first: sets the rate
    runs += [(n, 1) for n in names if n not in FOLLOWS_TABLE]
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-dns-") as tmp:
        workdir = Path(tmp)
        data = workdir / "queries.bin"
        write_binary(queries, data)
        sessions: dict[Run, list[Session]] = {run: [] for run in runs}
        failures = 0
        rate = args.rate
        for round_ in range(args.rounds):
            for run in runs:
                session = _session(args, plan, workdir, data, run, rate, round_ == 0)
                failures += session.wrong
                sessions[run].append(session)
                if not rate:  # ours, first round: sets every latency run's rate
                    rate = session.peak.qps / 2
    _print_table(args, runs, sessions, rate, ecs, len(queries), load)
    return 1 if failures else 0


@dataclass
class Session:
    """One server started once: its cold pass, its peak and its latency run."""

    cold: PerfResult
    peak: PerfResult
    half: PerfResult | None
    wrong: int
    waited: float = 0.0  # ms per second the server was runnable but off-core, latency run
    load: float = 0.0  # load average when the latency run ended
    cpu_us: float = float("nan")  # the server's CPU µs per answered query, latency run


def _session(
    args: argparse.Namespace,
    plan: Plan,
    workdir: Path,
    data: Path,
    run: Run,
    rate: float,
    check: bool,
) -> Session:
    """Start a server, check its answers (first round), warm it, measure it, stop it."""
    name, workers = run
    label = _label(name, workers)
    follows = name in FOLLOWS_TABLE and args.swap_every > 0
    table = workdir / f"table-{name}.json"
    swaps = TableSwaps(plan, table, args.swap_every if follows else 0.0, args.swap_moves)
    if follows:
        swaps.initial()
    running = servers.start(
        name,
        plan,
        workdir,
        args.geoip_db,
        args.fleet,
        ROOT,
        workers,
        args.threads,
        table_file=table if follows else None,
        code=args.base_root,
    )
    try:
        wrong = _report_checks(label, plan, running.port, args.geoip_db) if check else 0
        cold = run_dnsperf(running.port, data, 0, passes=1)  # every query new to the server
        with swaps:
            peak = run_dnsperf(running.port, data, args.duration)
        rate = rate or peak.qps / 2  # the first server sets the latency runs' rate
        half = None
        waited = 0.0
        cpu_us = float("nan")
        if args.latency_seconds > 0:
            pid = running.process.pid
            before, cpu = run_queue_wait_s(pid), run_cpu_s(pid)
            with swaps:
                half = run_dnsperf(running.port, data, args.latency_seconds, rate, latencies=True)
            waited = (run_queue_wait_s(pid) - before) / half_seconds(half, args)
            cpu_us = (run_cpu_s(pid) - cpu) / max(1, half.completed) * 1e6
    finally:
        running.stop()
    load = os.getloadavg()[0]
    print(
        f"  {label}: first pass {cold.qps:,.0f} qps; warm {peak.qps:,.0f} qps, lost {peak.lost}"
        + (f", {swaps.swaps} table swaps" if follows else "")
        + (
            f"; at {rate:,.0f} qps p50/p99 {half.p50_ms:.2f}/{half.p99_ms:.2f} ms, "
            f"lost {half.lost}, off-core {waited * 1000:.0f} ms/s, CPU {cpu_us:.2f} µs/query, "
            f"load {load:.1f}"
            if half
            else ""
        )
    )
    return Session(cold, peak, half, wrong, waited * 1000, load, cpu_us)


def half_seconds(half: PerfResult, args: argparse.Namespace) -> float:
    """Return how long a latency run lasted (its answers over its rate), at least 1 s."""
    return max(1.0, half.completed / half.qps if half.qps else args.latency_seconds)


def _report_checks(label: str, plan: Plan, port: int, database: Path) -> int:
    checks = verify(plan, port, database)
    bad = [c for c in checks if not c.ok]
    print(f"{label}: geo answers {len(checks) - len(bad)}/{len(checks)} correct (dig)")
    for check in bad[:10]:
        print(
            f"  WRONG {check.client} {check.name} {check.rdtype} ({check.place}): got "
            f"{sorted(check.got)}, expected one of {sorted(check.expected)}"
            + ("" if check.ecs_echoed else ", no Client Subnet in the reply")
        )
    return len(bad)


def _ratios(sessions: dict[Run, list[Session]], run: Run, rival: Run) -> list[float]:
    """Return a server's rate over a rival's, round by round (each pair measured back to back)."""
    pairs = zip(sessions.get(run, []), sessions.get(rival, []), strict=False)
    return [a.peak.qps / b.peak.qps for a, b in pairs if b.peak.qps]


def _ratio_text(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    text = f"{statistics.median(ratios):.2f}"
    if len(ratios) > 1:
        text += f" ({min(ratios):.2f}–{max(ratios):.2f})"
    return text


def _print_table(
    args: argparse.Namespace,
    runs: list[Run],
    sessions: dict[Run, list[Session]],
    rate: float,
    ecs: float,
    count: int,
    load: tuple[float, float, float],
) -> None:
    pdns, gdnsd = ("powerdns", 1), ("gdnsd", 1)
    print()
    print(
        f"dnsperf, {args.duration:g} s per server x {args.rounds} round(s) after one warm-up "
        f"pass, {IN_FLIGHT} queries in flight from {CLIENTS} ports, {count} queries "
        f"(A/AAAA, {ecs:.0%} with ECS), {os.cpu_count()} cores shared with dnsperf, load "
        f"average before {load[0]:.1f}, {args.threads} UDP thread(s) per competitor"
        + (
            f"; our server's table swapped every {args.swap_every:g} s from the start of each "
            f"timed run, {args.swap_moves:.0%} of its lists changed per swap"
            if args.swap_every > 0
            else ""
        )
    )
    print(
        f"qps: median of the rounds; × PowerDNS, × gdnsd: median of the rounds' ratios (range); "
        f"latency: each server at {rate:,.0f} qps "
        f"({'--rate' if args.rate else 'half our single-process peak'}) for "
        f"{args.latency_seconds:g} s every round, every answer timed: medians of the rounds, "
        f"p99 range; off-core: ms per second the server was runnable but waiting for a core"
    )
    print()
    print(
        "| server | qps (first pass) | qps | lost | p50 / p99 ms at half | p99 range "
        "| lost at half | off-core ms/s | × PowerDNS | × gdnsd |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        found = sessions[run]
        peak = statistics.median(s.peak.qps for s in found)
        lost = sum(s.peak.lost + s.cold.lost for s in found)
        print(
            f"| {_label(*run)} | {found[0].cold.qps:,.0f} | {peak:,.0f} | {lost} "
            f"| {_latency_text(found)} | {_ratio_text(_ratios(sessions, run, pdns))} "
            f"| {_ratio_text(_ratios(sessions, run, gdnsd))} |"
        )
    ours = (OURS, 1)
    base = ("base", 1)
    if ours in sessions and base in sessions:
        mine, theirs = sessions[ours], sessions[base]
        print()
        print(
            f"trafficmgr × base tree, qps: {_ratio_text(_ratios(sessions, ours, base))}"
            f"; at {rate:,.0f} qps, p99 {_median_p99(mine):.2f} ms against "
            f"{_median_p99(theirs):.2f} ms, server CPU {_median_cpu(mine):.2f} µs/query "
            f"against {_median_cpu(theirs):.2f}"
        )
    if ours in sessions and pdns in sessions and gdnsd in sessions:
        found = sessions[ours]
        p99 = _median_p99(found)
        lost = sum(s.peak.lost + s.cold.lost + (s.half.lost if s.half else 0) for s in found)
        verdicts = [
            ("≥ 1.0 × PowerDNS", statistics.median(_ratios(sessions, ours, pdns)) >= 1.0),
            ("≥ 0.5 × gdnsd", statistics.median(_ratios(sessions, ours, gdnsd)) >= 0.5),
            ("no lost queries", lost == 0),
            (f"p99 ≤ {TARGET_LATENCY_MS:g} ms at half rate", p99 <= TARGET_LATENCY_MS),
        ]
        print()
        print("targets: " + "; ".join(f"{t} {'met' if ok else 'NOT met'}" for t, ok in verdicts))
        rival = _median_p99(sessions[gdnsd])
        if rival > TARGET_LATENCY_MS:
            print(
                f"gdnsd's p99 at the same rate was {rival:.2f} ms: the machine (dnsperf and "
                "other work on the same cores) is the limit in this run, not the server"
            )


def _median_cpu(found: list[Session]) -> float:
    cpu = [s.cpu_us for s in found if s.half]
    return statistics.median(cpu) if cpu else float("nan")


def _median_p99(found: list[Session]) -> float:
    p99s = [s.half.p99_ms for s in found if s.half]
    return statistics.median(p99s) if p99s else float("nan")


def _latency_text(found: list[Session]) -> str:
    """Return the latency columns: median p50 / p99, p99 range, lost, off-core time."""
    halves = [s for s in found if s.half]
    if not halves:
        return "- | - | - | -"
    p50 = statistics.median(s.half.p50_ms for s in halves if s.half)
    p99s = [s.half.p99_ms for s in halves if s.half]
    lost = sum(s.half.lost for s in halves if s.half)
    waited = statistics.median(s.waited for s in halves)
    return (
        f"{p50:.2f} / {statistics.median(p99s):.2f} | {min(p99s):.2f}–{max(p99s):.2f} "
        f"| {lost} | {waited:.0f}"
    )


if __name__ == "__main__":
    sys.exit(main())
