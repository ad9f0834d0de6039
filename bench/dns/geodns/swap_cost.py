"""CPU per query in the first pass over the query file after a table swap, in process.

    .venv/bin/python -m bench.dns.geodns.swap_cost [--swaps 11] [--base-root DIR]

No sockets and no dnsperf: the server's UDP handler is called directly on the benchmark's
query file (``queries``; the source address is loopback, 85 % of the queries carry ECS) with
the plan's table, so the figures are the server's own CPU time, free of the machine's noise
that the dnsperf runs carry. It prints µs per query for the first pass (everything new), a
warm pass (the median of five), and the first pass after each of ``--swaps`` swaps to a new
table version in which a share of the lists moved (``swaps.version_of``: 0, 25 % and 100 %).
With ``--base-root`` it runs the same in another tree (a copy taken before a change) too.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.suite import ROOT

FLEET = ROOT / "examples" / "fleet.yaml"
DATABASE = ROOT / "tests" / "data" / "geoip" / "GeoIP2-City-Test.mmdb"
MOVES = (0.0, 0.25, 1.0)


def measure(swaps: int) -> None:
    """Print the figures for the server ``trafficmgr`` imports from (the path chooses it)."""
    import trafficmgr
    from bench.dns.geodns.plan import make_plan
    from bench.dns.geodns.queries import QueryMix, make_queries
    from bench.dns.geodns.swaps import version_of
    from trafficmgr.dns.config import ServerConfig
    from trafficmgr.dns.server import DnsServer
    from trafficmgr.fleetfile import load_fleet_file
    from trafficmgr.geoip import Locator

    plan = make_plan(FLEET)
    mix = QueryMix(names=tuple(f"{label}.{plan.zone}" for label in plan.names))
    queries, _ = make_queries(mix, DATABASE)
    rng = random.Random(1)
    config = ServerConfig(port=0, state_file=None, rrl_rate=0)
    table = version_of(plan, 0, 0.0, rng)
    server = DnsServer(load_fleet_file(str(FLEET)), config, locator=Locator(str(DATABASE)))
    server.set_table(table)
    handle = server.responder.handle_udp

    def one_pass() -> float:
        start = time.perf_counter()
        for wire in queries:
            handle(wire, "127.0.0.1")
        return (time.perf_counter() - start) / len(queries) * 1e6

    print(f"{Path(trafficmgr.__file__).parent.parent}: {len(queries)} queries")
    print(f"  first pass {one_pass():.2f} µs/query")
    print(f"  warm {statistics.median(one_pass() for _ in range(5)):.2f} µs/query")
    version = 1
    for moves in MOVES:
        after = []
        for _ in range(swaps):
            version += 1
            server.set_table(version_of(plan, version, moves, rng))
            after.append(one_pass())
        print(
            f"  first pass after a swap, {moves:.0%} of the lists moved: "
            f"{statistics.median(after):.2f} µs/query ({min(after):.2f}–{max(after):.2f})"
        )
    counted = {k: v for k, v in server.metrics.items() if k.startswith("cache_")}
    print(f"  counters: {counted}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--swaps", type=int, default=11, help="swaps per share of moved lists")
    parser.add_argument("--base-root", type=Path, help="also measure the server of this tree")
    args = parser.parse_args()
    if args.base_root is not None:
        here = [sys.executable, "-m", "bench.dns.geodns.swap_cost", "--swaps", str(args.swaps)]
        for code in (ROOT, args.base_root.resolve()):
            # the safe path: ``trafficmgr`` from ``code``, the benchmark from this checkout
            env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
            subprocess.run(here, cwd=ROOT, env=env, check=True)
        return 0
    measure(args.swaps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
