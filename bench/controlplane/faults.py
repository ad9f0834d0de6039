"""What each fault costs the distributed topology: answers lost, errors, events, regions down.

One cluster, every service a process of its own (``trafficmgr.testing.topology.cluster``: uvicorn x
2, celery worker and beat, the DNS server, one simulated agent per endpoint of examples/fleet.yaml:
14), on a PostgreSQL server and a Redis of its own (``trafficmgr.testing.topology.privatepg``, a
private redis-server), so the shared ones stay up for others. For each fault in turn, with the fleet
settled first, it watches DNS (three vantage points every 0.2 s), ``POST /api/v1/route`` (every 0.1
s) and every published table, applies the fault, and counts
(``trafficmgr.testing.topology.faults``):

- answers lost: DNS queries without an answer, decisions that got no HTTP answer at all;
- non-contract errors: decisions answered 5xx other than 503 with Retry-After;
- events lost: region state changes seen in the tables that no stored event explains;
- history lost (PostgreSQL outage): heartbeat history rows missing for the buckets that began
  during the outage (one per endpoint and 10 s bucket);
- regions wrongly down: regions seen down or recovering that the fault did not take out;
- recovery: from the fault's end until a table with every region healthy at full ramp.

Faults: PostgreSQL stopped (immediate shutdown) for ``--outage`` s, Redis SIGKILLed and
restarted empty after ``--outage`` s, the worker process holding the tick lock SIGKILLed
mid-tick, celery beat SIGKILLed (restarted after 5 s, as a supervisor would), one uvicorn
worker SIGKILLed, one agent SIGSTOPped for ``--outage`` s (its region keeps other endpoints).

Run: .venv/bin/python -m bench.controlplane.faults [--outage 20] [--only postgres,redis,...]
(needs initdb/pg_ctl and redis-server installed, nothing running; about 8 minutes).
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.suite import ROOT
from trafficmgr.contracts import (
    TABLE_REDIS_CHANNEL,
    TICK_INFO_KEY,
    TICK_LAST_AT,
    TICK_LOCK_KEY,
    redis_key,
)
from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.faults import (
    Cost,
    Watch,
    history_rows,
    start_fault_cluster,
    stop_fault_cluster,
)
from trafficmgr.testing.topology.processes import signal_group, wait_until

FLEET = ROOT / "examples" / "fleet.yaml"


def postgres(cluster: Cluster, outage: float) -> tuple[float, tuple[str, ...]]:
    cluster.pg.stop()  # type: ignore[attr-defined]
    time.sleep(outage)
    cluster.pg.start()  # type: ignore[attr-defined]
    return time.time(), ()


def redis(cluster: Cluster, outage: float) -> tuple[float, tuple[str, ...]]:
    channel = TABLE_REDIS_CHANNEL
    subscribers = int(cluster.redis.pubsub_numsub(channel)[0][1])  # the DNS server, the watch
    cluster.kill_redis()
    time.sleep(outage)
    cluster.restart_redis()
    back = time.time()
    wait_until(
        lambda: int(cluster.redis.pubsub_numsub(channel)[0][1]) >= subscribers,
        30,
        "the DNS server to subscribe again",
        every=0.02,
    )
    print(f"  the DNS server follows the table again {time.time() - back:.2f} s after", flush=True)
    return back, ()


def worker(cluster: Cluster, outage: float) -> tuple[float, tuple[str, ...]]:
    holder = wait_until(
        lambda: cluster.redis.get(redis_key(TICK_LOCK_KEY)), 10, "a tick to run", every=0.002
    )
    last = float(cluster.redis.hget(redis_key(TICK_INFO_KEY), TICK_LAST_AT) or 0)
    os.kill(int(holder.split(":")[1]), signal.SIGKILL)
    killed = time.time()
    wait_until(
        lambda: float(cluster.redis.hget(redis_key(TICK_INFO_KEY), TICK_LAST_AT) or 0) > killed,
        30,
        "a tick after the kill",
        every=0.02,
    )
    resumed = float(cluster.redis.hget(redis_key(TICK_INFO_KEY), TICK_LAST_AT) or 0)
    print(
        f"  next tick done {resumed - killed:.2f} s after the kill, {resumed - last:.2f} s "
        f"after the last one before it ({cluster.tick_s:g} s interval)",
        flush=True,
    )
    return killed, ()


def beat(cluster: Cluster, outage: float) -> tuple[float, tuple[str, ...]]:
    proc = cluster.process("beat")
    cluster.kill(proc)
    proc.name = "beat (killed)"
    time.sleep(5)
    cluster.spawn("beat", list(proc.popen.args))  # type: ignore[arg-type]
    return time.time(), ()


def web(cluster: Cluster, outage: float) -> tuple[float, tuple[str, ...]]:
    os.kill(cluster.web_workers()[0], signal.SIGKILL)
    return time.time(), ()


def agent(cluster: Cluster, outage: float) -> tuple[float, tuple[str, ...]]:
    region = next(r for r in cluster.region_names() if len(cluster.endpoints_of(r)) > 1)
    proc = cluster.process(f"agent-{cluster.endpoints_of(region)[-1]}")
    signal_group(proc.pid, signal.SIGSTOP)
    time.sleep(outage)
    signal_group(proc.pid, signal.SIGCONT)
    return time.time(), ()


FAULTS: dict[str, tuple[str, Callable[[Cluster, float], tuple[float, tuple[str, ...]]]]] = {
    "postgres": ("PostgreSQL down {outage:g} s", postgres),
    "redis": ("Redis SIGKILL, back empty after {outage:g} s", redis),
    "worker": ("worker SIGKILL mid-tick", worker),
    "beat": ("beat SIGKILL (back after 5 s)", beat),
    "web": ("web worker SIGKILL", web),
    "agent": ("agent SIGSTOP {outage:g} s", agent),
}


def run(cluster: Cluster, name: str, outage: float) -> Cost:
    cluster.wait_settled(90)
    watch = Watch(cluster)
    time.sleep(2)
    label, fault = FAULTS[name]
    began = time.time()
    ended, expected = fault(cluster, outage)
    watch.expected_down = expected
    cost = watch.cost(label.format(outage=outage), ended, settle_s=90)
    cost.notes.append(f"fault lasted {ended - began:.1f} s")
    if name == "postgres":  # the heartbeats were taken: their history must all arrive
        time.sleep(3)  # the history writers' next flush
        stored, cost.history_expected = history_rows(cluster, int(began), int(ended))
        cost.history_lost = cost.history_expected - stored
    return cost


def table(costs: list[Cost]) -> str:
    head = (
        f"{'fault':44} {'answers lost':>14} {'non-contract':>12} {'events lost':>11} "
        f"{'history lost':>12} {'wrongly down':>12} {'recovery s':>10}"
    )
    lines = [head, "-" * len(head)]
    for c in costs:
        lost = f"{c.answers_lost}/{c.answers}"
        recovery = "-" if c.recovery_s is None else f"{c.recovery_s:.1f}"
        history = "-" if c.history_lost is None else f"{c.history_lost}/{c.history_expected}"
        lines.append(
            f"{c.fault:44} {lost:>14} {c.non_contract:>12} {c.events_lost:>11} "
            f"{history:>12} {len(c.wrongly_down):>12} {recovery:>10}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outage", type=float, default=20.0)
    parser.add_argument("--only", default=",".join(FAULTS))
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    workdir = Path(tempfile.mkdtemp(prefix="trafficmgr-faults-"))
    print(f"starting the cluster in {workdir} ...", flush=True)
    cluster, pg = start_fault_cluster(workdir, FLEET.read_text())
    cluster.pg = pg  # type: ignore[attr-defined]
    costs: list[Cost] = []
    try:
        for name in names:
            print(f"fault: {name} ...", flush=True)
            cost = run(cluster, name, args.outage)
            costs.append(cost)
            extra = f"; wrongly down: {cost.wrongly_down}" if cost.wrongly_down else ""
            print(f"  {cost.notes}{extra}", flush=True)
    finally:
        stop_fault_cluster(cluster, pg)
    print()
    print(table(costs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
