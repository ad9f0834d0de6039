"""Faults on the distributed topology and what they cost, for the fault tests and
``bench/controlplane/faults.py``.

A fault cluster is a ``Cluster`` (``cluster``) on a PostgreSQL server of its own
(``PrivatePostgres``), so that stopping it leaves the shared one alone. A ``Watch`` records,
while a fault runs: every published table (``TableFeed``), DNS answers to three vantage
points, and ``POST /api/v1/route`` answers. ``Watch.cost`` turns that into the figures:

- answers lost: DNS queries left without an answer, decisions that failed to connect;
- non-contract errors: decisions answered 5xx other than 503 with ``Retry-After``;
- events lost: region state changes the tables showed that no stored event explains;
- regions wrongly down: regions seen ``down`` or ``recovering`` that no fault took out;
- recovery: from the fault's end until a tick judged the fleet again (not holding the last
  decision) and the published table has every region healthy at full ramp.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from trafficmgr.contracts import TICK_DECIDED_AT, TICK_INFO_KEY, redis_key
from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.consistency import unexplained
from trafficmgr.testing.topology.observe import CLIENTS, DnsWatch, TableFeed, region_of_address
from trafficmgr.testing.topology.privatepg import PrivatePostgres
from trafficmgr.testing.topology.processes import wait_until
from trafficmgr.testing.topology.stores import Services

DOWN_STATES = ("down", "recovering")


def start_fault_cluster(workdir: Path, fleet_yaml: str) -> tuple[Cluster, PrivatePostgres]:
    """A cluster on a PostgreSQL server of its own (stopped and removed by ``stop``)."""
    pg = PrivatePostgres().start()
    try:
        cluster = Cluster(workdir, fleet_yaml, Services(pg.url, ""))
        cluster.start()
    except BaseException:
        stop_fault_cluster(None, pg)
        raise
    return cluster, pg


def stop_fault_cluster(cluster: Cluster | None, pg: PrivatePostgres) -> list[str]:
    left: list[str] = []
    try:
        if cluster is not None:
            if not pg.running():
                pg.start()
            left = cluster.stop()
    finally:
        pg.remove()
    return left


def history_rows(cluster: Cluster, first: int, last: int) -> tuple[int, int]:
    """Heartbeat history rows stored for the buckets starting in [first, last], and how many
    there should be (one per endpoint and bucket)."""
    import psycopg

    buckets = list(range(first - first % 10 + 10, last - 9, 10))
    endpoints = sum(len(cluster.endpoints_of(r)) for r in cluster.region_names())
    if not buckets:
        return 0, 0
    with psycopg.connect(cluster.database_url.replace("postgres://", "postgresql://")) as c:
        row = c.execute(
            "SELECT count(*) FROM regions_heartbeatsample WHERE bucket = ANY(%s)", (buckets,)
        ).fetchone()
    return (int(row[0]) if row else 0), endpoints * len(buckets)


def transition_events(cluster: Cluster, since: float) -> list[dict[str, str]]:
    """The region transitions the cluster stored since ``since``, oldest first."""
    import psycopg

    with psycopg.connect(cluster.database_url.replace("postgres://", "postgresql://")) as c:
        rows = c.execute(
            "SELECT region, data::text FROM regions_event WHERE endpoint = '' "
            "AND at >= to_timestamp(%s) ORDER BY at, id",
            (since,),
        ).fetchall()
    out = []
    for region, data in rows:
        doc = json.loads(data)
        if "old" in doc and "new" in doc:
            out.append({"region": region, "old": doc["old"], "new": doc["new"]})
    return out


@dataclass
class Cost:
    fault: str
    answers_lost: int = 0
    answers: int = 0
    non_contract: int = 0
    events_lost: int = 0
    wrongly_down: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    history_lost: int | None = None  # of history_expected rows (buckets x endpoints)
    history_expected: int = 0
    notes: list[str] = field(default_factory=list)


class Watch:
    """DNS, decisions and published tables, watched from threads while a fault runs."""

    def __init__(self, cluster: Cluster, expected_down: tuple[str, ...] = ()) -> None:
        self.cluster = cluster
        self.expected_down = expected_down
        self.started = time.time()
        self.feed = TableFeed(cluster.redis_url)
        name = f"llama-3-70b.{cluster.fleet['zone']}"
        self.dns = DnsWatch(
            cluster.dns, name, dict(CLIENTS), region_of_address(cluster.fleet), every_s=0.2
        ).start()
        self.decisions: list[tuple[float, int, bool]] = []  # (at, status, retry-after given)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._decide, name="decisions", daemon=True)
        self._thread.start()

    def _decide(self) -> None:
        body = json.dumps(
            {
                "model": "llama-3-70b",
                "client_country": "DE",
                "input_tokens": 200,
                "max_output_tokens": 20,
            }
        ).encode()
        while not self._stop.is_set():
            request = urllib.request.Request(
                f"{self.cluster.url}/api/v1/route",
                data=body,
                method="POST",
                headers={
                    "Authorization": f"Bearer {self.cluster.tokens['admin']}",
                    "Content-Type": "application/json",
                },
            )
            at = time.time()
            try:
                with urllib.request.urlopen(request, timeout=3) as response:
                    self.decisions.append((at, response.status, False))
            except urllib.error.HTTPError as exc:
                self.decisions.append((at, exc.code, bool(exc.headers.get("Retry-After"))))
            except (OSError, urllib.error.URLError):
                self.decisions.append((at, 0, False))
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.dns.stop()
        self.feed.close()

    def states(self) -> list[dict[str, str]]:
        return [
            {r: str(s.get("state", "")) for r, s in t.doc["regions"].items()}
            for t in self.feed.since(self.started)
        ]

    def cost(self, fault: str, ended_at: float, settle_s: float = 40.0) -> Cost:
        """Wait for recovery (up to ``settle_s``), stop watching, and count."""
        cost = Cost(fault)
        try:
            wait_until(
                lambda: self._recovered(ended_at),
                settle_s,
                "a tick judging the fleet again, every region healthy at full ramp",
                every=0.05,
            )
            cost.recovery_s = round(max(0.0, time.time() - ended_at), 2)
        except AssertionError as exc:
            cost.notes.append(str(exc))
        finally:
            self.stop()
        answers = self.dns.answers
        cost.answers = len(answers) + len(self.decisions)
        cost.answers_lost = sum(1 for a in answers if a.error or not a.regions)
        cost.answers_lost += sum(1 for _, status, _ in self.decisions if status == 0)
        cost.non_contract = sum(
            1 for _, s, retry in self.decisions if s >= 500 and not (s == 503 and retry)
        )
        cost.wrongly_down = sorted(
            {
                r
                for table in self.states()
                for r, s in table.items()
                if s in DOWN_STATES and r not in self.expected_down
            }
        )
        events = transition_events(self.cluster, self.started - 1)
        cost.events_lost = len(unexplained(self.states(), events))
        return cost

    def _recovered(self, ended_at: float) -> bool:
        decided = float(self.cluster.redis.hget(redis_key(TICK_INFO_KEY), TICK_DECIDED_AT) or 0)
        return decided > ended_at and self.cluster.settled() is not None
