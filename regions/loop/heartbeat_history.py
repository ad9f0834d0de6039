"""Heartbeat history: one downsampled row per endpoint and ``SAMPLE_EVERY_S`` bucket.

Rows are written in batches off the request path (``HistoryWriter``), kept while the
database is away and written once it is back, and purged after the retention. Kept apart
from ``ingest`` because this is the only part of a heartbeat's path that touches the
database, with a failure story of its own: routing reads the hot state, so a heartbeat is
accepted whether or not its history row can be stored now.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading

from django.db import DatabaseError, IntegrityError, close_old_connections, connections, transaction

from regions.hotstate import impairment
from regions.models import HeartbeatSample
from trafficmgr.routing.types import Heartbeat

log = logging.getLogger(__name__)

SAMPLE_EVERY_S = 10


def history_row(endpoint_pk: int, bucket: int, hb: Heartbeat) -> HeartbeatSample:
    """Summarise a heartbeat as its bucket's history row."""
    gpus = hb.gpus
    n = len(gpus)
    s, p = hb.server, hb.probe
    return HeartbeatSample(
        endpoint_id=endpoint_pk,
        bucket=bucket,
        received_at=dt.datetime.fromtimestamp(hb.received_at, dt.UTC),
        seq=hb.seq,
        gpus=n,
        gpu_util_pct=sum(g.util_pct for g in gpus) / n if n else 0.0,
        mem_used_mb=sum(g.mem_used_mb for g in gpus),
        mem_total_mb=sum(g.mem_total_mb for g in gpus),
        temp_c_max=max((g.temp_c for g in gpus), default=0.0),
        power_w=sum(g.power_w for g in gpus),
        ecc_errors=min(sum(g.ecc_errors for g in gpus), 2**31 - 1),
        xid_errors=min(sum(g.xid_errors for g in gpus), 2**31 - 1),
        throttled_gpus=sum(1 for g in gpus if g.throttle_reasons),
        requests_running=s.requests_running if s else None,
        requests_waiting=s.requests_waiting if s else None,
        kv_cache_usage=s.kv_cache_usage if s else None,
        tokens_per_s=s.tokens_per_s if s else None,
        ttft_p99_ms=s.ttft_p99_ms if s else None,
        probe_ok=p.ok if p else None,
        probe_latency_ms=p.latency_ms if p else None,
    )


def store_samples(rows: list[HeartbeatSample]) -> None:
    """Insert history rows in one statement; rows of endpoints deleted meanwhile are dropped."""
    try:
        with transaction.atomic():
            HeartbeatSample.objects.bulk_create(rows, ignore_conflicts=True)
        return
    except IntegrityError:
        if len(rows) == 1:
            log.info("heartbeat sample of deleted endpoint %s dropped", rows[0].endpoint_id)
            return
    for row in rows:  # one bad row spoilt the batch: the others go one by one
        store_samples([row])


class HistoryWriter:
    """Store history rows from a background thread, batched: no database on the hot path.

    A row waits at most ``flush_s`` while the database answers. While it is away the rows are
    kept and written once it is back (tried every ``retry_s``); beyond ``max_pending`` (at one
    row per endpoint every 10 s, 50,000 rows are over an hour of a 100-endpoint fleet) new
    rows are dropped and logged rather than let memory grow. Rows still pending when the
    process dies are lost: history is a downsampled record, routing reads the hot state.
    """

    def __init__(
        self, flush_s: float = 1.0, max_pending: int = 50_000, retry_s: float = 2.0
    ) -> None:
        self.flush_s = flush_s
        self.max_pending = max_pending
        self.database = impairment.Breaker(retry_s)
        self._rows: list[HeartbeatSample] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pid = 0
        self.dropped = 0

    def submit(self, row: HeartbeatSample) -> None:
        with self._lock:
            if len(self._rows) >= self.max_pending:
                self.dropped += 1
                if self.dropped % 1000 == 1:
                    log.warning("heartbeat history backlog full: %d rows dropped", self.dropped)
                return
            self._rows.append(row)
        if self._pid != os.getpid():
            self._start()

    def flush(self) -> int:
        """Store what is pending now; return how many rows were written (0 while the
        database is away: the rows stay pending, and the error is raised)."""
        if self.database.open:
            return 0
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return 0
        try:
            store_samples(rows)
        except DatabaseError:
            self.database.failed()
            with self._lock:
                room = max(0, self.max_pending - len(self._rows))
                self.dropped += max(0, len(rows) - room)
                self._rows[:0] = rows[:room]
            raise
        self.database.succeeded()
        return len(rows)

    def pending(self) -> int:
        with self._lock:
            return len(self._rows)

    def stop(self) -> None:
        """End the thread and store what is pending (at exit)."""
        self._wake.set()
        self._pid = 0
        self._flush_quietly()

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            wake = self._wake = threading.Event()
        threading.Thread(
            target=self._run, args=(wake,), name="trafficmgr-history", daemon=True
        ).start()

    def _run(self, wake: threading.Event) -> None:
        while not wake.wait(self.flush_s):
            try:
                close_old_connections()  # CONN_MAX_AGE and health checks, as a request would
            except Exception:  # a connection broken while the database was away
                log.debug("closing old connections failed", exc_info=True)
            self._flush_quietly()
        connections.close_all()

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except DatabaseError as exc:  # the rows wait for the database; ingest goes on
            log.warning(
                "heartbeat history waits for the database (%d rows): %s", self.pending(), exc
            )
        except Exception:
            log.exception("heartbeat history rows lost")


# Rows the request path (``ingest``) could not store, written by this writer later.
late_history = HistoryWriter()


def purge_history(now: float, retention_days: float) -> int:
    """Delete heartbeat samples older than the retention; return how many went."""
    cutoff = dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=retention_days)
    deleted, _ = HeartbeatSample.objects.filter(received_at__lt=cutoff).delete()
    return deleted
