"""What the gateway's decision costs per request, hot and after an idle gap.

The decision core alone (``RequestPath``: ``admit``, ``served``, ``finished`` of one request,
the gateway's sequence without its HTTP), over the fleet of ``bench/gateway/overhead.py``
(two H100 endpoints, one model, the same prompt), timed with ``perf_counter`` around each
request:

- **hot**: requests back to back, as at a router's peak, where every request finds the code
  and the data it touches in the caches;
- **after a gap**: the process sleeps ``--gap-ms`` before each request (0.5 ms: the spacing
  of an open loop at 2,000 req/s), as a router that is idle between requests does: the core
  has run something else meanwhile, and the request finds its caches cold.

The difference is why a router's CPU per request at 2,000 req/s is well above its CPU per
request at its peak (``bench/gateway/overhead.py``'s ``us/req`` against ``r/s/core``), and
why a large code path (an interpreter's) pays more for it than a small one.

    .venv/bin/python -m bench.gateway.core [--requests 20000] [--gap-ms 0.5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from bench.gateway.overhead import FLEET
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.requestpath import (
    ClientIdentity,
    Outcome,
    Refusal,
    RequestInfo,
    RequestPath,
    RequestPathConfig,
    StaticSource,
    Usage,
)

INFO = RequestInfo(
    model="bench",
    client_ip="127.0.0.1",
    identity=ClientIdentity("bench"),
    priority=None,
    strategy=None,
    session_id=None,
    prompt="user: How far is the nearest region today?",
    max_output_tokens=1,
    request_id="bench",
)


async def timed(core: RequestPath, requests: int, gap_s: float) -> float:
    """Return the median µs of one request's decision and accounting."""
    samples = []
    for _ in range(requests):
        if gap_s:
            time.sleep(gap_s)  # idle, as between two requests of an open loop
        began = time.perf_counter()
        plan = await core.admit(INFO)
        if isinstance(plan, Refusal):
            raise SystemExit(f"refused: {plan.message}")
        core.served(plan.handle, plan.targets[0].name)
        core.finished(plan.handle, Usage(8, 1), Outcome.OK)
        samples.append(time.perf_counter() - began)
    return 1e6 * statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--gap-ms", type=float, default=0.5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(FLEET.format(port=9, port2=10))  # never connected to
        core = RequestPath(StaticSource(load_fleet_file(str(fleet)), {}), RequestPathConfig())
        core.maintain()
    hot, cold = [], []
    for i in range(args.repeats):
        hot.append(uvloop.run(timed(core, args.requests, 0.0)))
        cold.append(uvloop.run(timed(core, args.requests // 10, args.gap_ms / 1000)))
        print(
            f"  repeat {i + 1}/{args.repeats}: hot {hot[-1]:.1f} µs, "
            f"after a {args.gap_ms:g} ms gap {cold[-1]:.1f} µs",
            file=sys.stderr,
        )
    print(f"{'decision + accounting per request':<36} {'median µs':>10}")
    print(f"{'hot (back to back)':<36} {min(hot):>10.1f}")
    print(f"{f'after a {args.gap_ms:g} ms idle gap':<36} {min(cold):>10.1f}")
    print(f"cold / hot: {min(cold) / min(hot):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
