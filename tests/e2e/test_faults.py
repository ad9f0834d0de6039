"""Store outages and dead processes on the distributed topology: the fleet stays up.

One cluster (every service a process of its own, ``trafficmgr.testing.topology.cluster``) on a
PostgreSQL server and a Redis of its own, so the faults reach nobody else. Short faults here (5 s);
the long version with a table of costs is ``bench/controlplane/faults.py``. Targets:

- a PostgreSQL or Redis outage marks no region down and loses no event, and the heartbeat
  history written meanwhile reaches the database once it is back;
- after Redis returns the DNS server follows the table again within 3 s, and the counters
  behind /metrics did not start over;
- a worker killed mid-tick costs at most two tick intervals;
- a forged heartbeat silences its endpoint for one interval at most;
- 12 concurrent API clients stay within the per-process connection ceilings.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.worlds import CLUSTER
from trafficmgr.contracts import (
    COUNTERS_KEY,
    TABLE_REDIS_CHANNEL,
    TICK_INFO_KEY,
    TICK_LAST_AT,
    TICK_LOCK_KEY,
    redis_key,
)
from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.faults import Watch, start_fault_cluster, stop_fault_cluster
from trafficmgr.testing.topology.privatepg import PostgresMissing
from trafficmgr.testing.topology.processes import wait_until
from trafficmgr.testing.topology.stores import ServicesMissing, find_services

pytestmark = pytest.mark.integration
OUTAGE_S = 5.0
POOL_MAX = 8  # settings.py's default TRAFFICMGR_DB_POOL_MAX


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        find_services(dict(os.environ))
    except ServicesMissing as exc:
        pytest.skip(str(exc))
    try:
        cluster, pg = start_fault_cluster(tmp_path_factory.mktemp("faults"), CLUSTER)
    except PostgresMissing as exc:
        pytest.skip(f"no private PostgreSQL: {exc}")
    cluster.pg = pg  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        left = stop_fault_cluster(cluster, pg)
        assert not left, f"processes still running: {left}"


def describe(cost: Any) -> str:
    return json.dumps(cost.__dict__, default=str)


def test_a_postgresql_outage_takes_no_region_down_and_loses_nothing(faulty: Cluster) -> None:
    import psycopg

    faulty.wait_settled()
    watch = Watch(faulty)
    time.sleep(1)  # the watch's own token is known to every web process
    stopped = time.time()
    faulty.pg.stop()  # type: ignore[attr-defined]
    time.sleep(OUTAGE_S)
    faulty.pg.start()  # type: ignore[attr-defined]
    back = time.time()
    cost = watch.cost("postgres", back)
    print(f"\npostgres {OUTAGE_S:g} s: {describe(cost)}")
    assert cost.wrongly_down == [], describe(cost)
    assert cost.events_lost == 0, describe(cost)
    assert cost.non_contract == 0, describe(cost)
    # The history buckets that began during the outage reach the database afterwards.
    buckets = [
        b
        for b in range(int(stopped) // 10 * 10, int(back) + 10, 10)
        if stopped + 0.5 < b < back - 0.5
    ]
    if buckets:
        url = faulty.database_url.replace("postgres://", "postgresql://")

        def written() -> bool:
            with psycopg.connect(url) as c:
                rows = c.execute(
                    "SELECT count(*) FROM regions_heartbeatsample WHERE bucket = ANY(%s)",
                    (buckets,),
                ).fetchone()
            endpoints = sum(len(faulty.endpoints_of(r)) for r in faulty.region_names())
            return bool(rows and rows[0] >= endpoints * len(buckets))

        wait_until(written, 15, f"the history rows of buckets {buckets}")


def test_a_redis_restart_takes_no_region_down_and_dns_follows_again(faulty: Cluster) -> None:
    faulty.wait_settled()
    channel = TABLE_REDIS_CHANNEL
    counters_before = float(faulty.redis.hget(redis_key(COUNTERS_KEY), "ticks|result=ran") or 0)
    watch = Watch(faulty)
    subscribers = int(faulty.redis.pubsub_numsub(channel)[0][1])
    faulty.kill_redis()
    time.sleep(OUTAGE_S)
    faulty.restart_redis()
    back = time.time()
    wait_until(
        lambda: int(faulty.redis.pubsub_numsub(channel)[0][1]) >= subscribers,
        10,
        "the DNS server (and the watch) to subscribe again",
        every=0.05,
    )
    resubscribed = time.time() - back
    cost = watch.cost("redis", back)
    print(f"\nredis {OUTAGE_S:g} s: {describe(cost)}; DNS back on the table {resubscribed:.2f} s")
    assert resubscribed <= 3.0
    assert cost.wrongly_down == [], describe(cost)
    assert cost.events_lost == 0, describe(cost)
    counters_after = float(faulty.redis.hget(redis_key(COUNTERS_KEY), "ticks|result=ran") or 0)
    assert counters_after >= counters_before, (counters_before, counters_after)


def test_a_worker_killed_mid_tick_costs_at_most_two_intervals(faulty: Cluster) -> None:
    faulty.wait_settled()
    lock = redis_key(TICK_LOCK_KEY)
    holder = wait_until(lambda: faulty.redis.get(lock), 10, "a tick to run", every=0.002)
    pid = int(holder.split(":")[1])
    last = float(faulty.redis.hget(redis_key(TICK_INFO_KEY), TICK_LAST_AT) or 0)
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: float(faulty.redis.hget(redis_key(TICK_INFO_KEY), TICK_LAST_AT) or 0) > killed,
        15,
        "a tick after the kill",
        every=0.05,
    )
    resumed = float(faulty.redis.hget(redis_key(TICK_INFO_KEY), TICK_LAST_AT) or 0)
    gap = resumed - max(last, killed)
    print(f"\nworker {pid} killed mid-tick: the next tick ran {gap:.2f} s later")
    assert gap <= 2 * faulty.tick_s + 0.5, f"the loop stood still {gap:.2f} s"


def test_a_forged_heartbeat_silences_its_endpoint_one_interval_at_most(faulty: Cluster) -> None:
    faulty.wait_settled()
    region = faulty.region_names()[0]
    endpoint = faulty.endpoints_of(region)[-1]
    forged = {
        "endpoint": endpoint,
        "seq": 2**53 - 1,
        "sent_at": time.time() + 25,
        "gpus": [],
    }
    request = urllib.request.Request(
        f"{faulty.url}/api/v1/heartbeats/",
        data=json.dumps(forged).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {faulty.tokens[region]}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read())["accepted"] is True
    posted = time.time()
    genuine = wait_until(
        lambda: (hb := faulty.heartbeat(endpoint)) and hb["seq"] != forged["seq"] and hb,
        5,
        "the agent's own heartbeat to be taken again",
        every=0.05,
    )
    silenced = genuine["received_at"] - posted
    print(f"\nforged heartbeat: {endpoint}'s own taken again after {silenced:.2f} s")
    assert silenced <= 1.0 + 1.0  # one interval, plus the agent's next heartbeat


def test_concurrent_clients_stay_within_the_connection_ceiling(faulty: Cluster) -> None:
    import psycopg

    statuses: list[int] = []

    def client(token: str) -> None:
        for _ in range(15):
            request = urllib.request.Request(
                f"{faulty.url}/api/v1/regions/", headers={"Authorization": f"Bearer {token}"}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)

    url = faulty.database_url.replace("postgres://", "postgresql://")
    peak = 0
    bad = "tmk_" + "x" * 43
    threads = [
        threading.Thread(target=client, args=(faulty.tokens["admin"] if i % 2 else bad,))
        for i in range(12)
    ]
    for t in threads:
        t.start()
    with psycopg.connect(url, autocommit=True) as c:
        while any(t.is_alive() for t in threads):
            row = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchone()
            peak = max(peak, int(row[0]) if row else 0)
            time.sleep(0.05)
    for t in threads:
        t.join()
    processes = 2 + 2 + 1 + 1  # web workers, celery pool, beat, the DNS command's
    print(f"\n12 concurrent clients: peak {peak} connections; statuses {sorted(set(statuses))}")
    assert all(s < 500 for s in statuses), sorted(set(statuses))
    assert peak <= processes * POOL_MAX + 1
