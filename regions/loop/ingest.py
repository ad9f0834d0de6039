"""Heartbeat ingest: strict validation, the agent's endpoint binding, compare-and-set, history.

A heartbeat is refused (400, naming the field) for unknown keys, wrong JSON types (no
silent coercion: ``"12"`` is not a number, ``true`` is not 1), NaN or ±Infinity (also when
spelled ``1e999``), ``util_pct`` outside 0..100, a ``util_source`` other than ``gpm_sm`` or
``nvml_util``, memory used above total, more than ``MAX_GPUS`` GPUs, over-long strings or
lists, a ``server.output_tokens`` histogram that is not cumulative (see
``validation.histograms``), a ``session`` that is not 1 to 64 letters, digits, ``-`` or
``_``, and ``sent_at`` more than ``FUTURE_S`` (the clock skew allowed, 30 s) ahead of or
``PAST_S`` (what an agent's buffer may hold after an outage, 10 min) behind the control
plane's clock. A replayed or out-of-order ``seq`` is not an error: it is answered 200
``{"accepted": false, "reason": "stale seq"}`` and changes nothing.

Ordering (``regions.hotstate.is_newer``): a heartbeat's ``seq`` counts within its agent's
``session`` (agents send a new random id each time they start; older agents send none and
are one session). Another session wins at once; in one session a higher seq wins, a seq
jump is believed only as far as ``SEQ_PER_S`` per second since the stored beat plus one
interval, and a lower seq loses only within one heartbeat interval of the stored beat: a
forged or replayed heartbeat cannot silence an endpoint for longer than one interval.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, IntegrityError, close_old_connections, connections, transaction

from regions import hotstate, metrics
from regions.errors import DomainError
from regions.fleet import snapshot
from regions.hotstate import impairment
from regions.models import AgentToken, HeartbeatSample
from regions.models import Endpoint as EndpointRow
from regions.validation import (
    BOOL,
    Field,
    Invalid,
    Kind,
    histograms,
    integer,
    number,
    obj,
    parse_json,
    string,
    validate,
)
from trafficmgr.routing.table_json import parse_iso8601
from trafficmgr.routing.types import (
    GpuSample,
    Heartbeat,
    OutputHistogram,
    ProbeSample,
    ServerSample,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024
MAX_GPUS = 64
FUTURE_S = 30.0
PAST_S = 600.0
SAMPLE_EVERY_S = 10
SERVER_KINDS = ("vllm", "tgi", "triton", "sim", "unknown")
# Where a GPU's util_pct came from: NVML GPM SM activity, or NVML utilization.gpu.
GPU_UTIL_SOURCES = ("gpm_sm", "nvml_util")
MAX_COUNT = 10_000_000
MAX_SAFE_INT = 2**53 - 1
MAX_HISTOGRAMS = 16  # models per server's output_tokens
MAX_BOUNDS = 64  # finite bounds per histogram


def _opt(kind: Kind, default: Any = None) -> Field:
    """An optional field that may also be null (the agent sends null for what it cannot read)."""
    return Field(("nullable", kind), required=False, default=default)


_TEXT_LIST = ("list", string(200, 0), 16)
_GPU = obj(
    {
        "index": Field(integer(0, 1023)),
        "uuid": _opt(string(128, 0), ""),
        "name": _opt(string(128, 0), ""),
        "util_pct": _opt(number(0, 100)),
        "util_source": _opt(("choice", GPU_UTIL_SOURCES)),
        "mem_used_mb": _opt(number(0, 1e9)),
        "mem_total_mb": _opt(number(0, 1e9)),
        "temp_c": _opt(number(-100, 250)),
        "power_w": _opt(number(0, 1e5)),
        "power_limit_w": _opt(number(0, 1e5)),
        "throttle_reasons": _opt(("list", string(64), 32), []),
        "ecc_errors": _opt(integer(0, MAX_COUNT)),
        "ecc_corrected": _opt(integer(0, MAX_COUNT)),
        "xid_errors": _opt(integer(0, MAX_COUNT), 0),
        "xid_last": _opt(integer(0, 1_000_000)),
        "lost": _opt(BOOL, False),
        "errors": _opt(_TEXT_LIST, []),
    }
)
_SERVER = obj(
    {
        "kind": Field(("choice", SERVER_KINDS)),
        "requests_running": _opt(integer(0, MAX_COUNT)),
        "requests_waiting": _opt(integer(0, MAX_COUNT)),
        "kv_cache_usage": _opt(number(0, 1)),
        "tokens_per_s": _opt(number(0, 1e9)),
        "ttft_p50_ms": _opt(number(0, 1e7)),
        "ttft_p99_ms": _opt(number(0, 1e7)),
        "models_loaded": _opt(("list", string(128), 256), []),
        "scrape_ok": _opt(BOOL, True),
        "garbage_lines": _opt(integer(0, MAX_COUNT), 0),
        "error": _opt(string(500, 0)),
        # per model, the server's cumulative histogram of output tokens (optional, newer agents)
        "output_tokens": _opt(histograms(MAX_HISTOGRAMS, MAX_BOUNDS, string(128))),
    }
)
_PROBE = obj(
    {
        "ok": Field(BOOL),
        "latency_ms": _opt(number(0, 1e7)),
        "status": _opt(integer(0, 999)),
        "reason": _opt(string(500, 0), ""),
    }
)
_AGENT = obj(
    {
        "version": _opt(string(64, 0), ""),
        "nvml": _opt(string(32, 0), ""),
        "driver": _opt(string(64, 0)),
        "dropped": _opt(integer(0, MAX_COUNT), 0),
        "errors": _opt(_TEXT_LIST, []),
    }
)
HEARTBEAT = obj(
    {
        "endpoint": Field(string(63)),
        "seq": Field(integer(0, MAX_SAFE_INT)),
        "sent_at": Field(("time",)),
        "interval_s": _opt(number(0, 3600)),
        "gpus": _opt(("list", _GPU, MAX_GPUS), []),
        "server": _opt(_SERVER),
        "probe": _opt(_PROBE),
        "agent": _opt(_AGENT),
        "drill": _opt(("scalars", 16, 200)),  # the drill the agent is obeying, as it reports it
        "session": _opt(string(64), ""),  # the agent run its seq counts in (newer agents)
    }
)
SESSION_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# The failover policy's heartbeat interval, as of the last fleet view an endpoint was looked
# up in: how long a stored heartbeat may block out-of-order ones (``hotstate.Order``).
_interval_s = 1.0


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: bool
    body: dict[str, Any]
    sample: HeartbeatSample | None = None  # the bucket's history row, when this beat opens it


def rejected(
    reason: str, status_code: int, detail: str, field: str = "", code: str = "invalid"
) -> DomainError:
    """Count a refused heartbeat and build the error the API answers."""
    metrics.count_ingest(False, reason)
    fields = {field: [detail]} if field else {}
    return DomainError(
        f"{field}: {detail}" if field else detail, fields=fields, code=code, status_code=status_code
    )


def error_deltas(
    gpus: list[dict[str, Any]], before: Mapping[str, list[int]]
) -> tuple[list[tuple[int, int]], dict[str, list[int]]]:
    """Turn the agent's running error counts into counts since its previous heartbeat.

    The agent reports XIDs seen since it started and uncorrected ECC errors since the driver
    loaded; the engine wants errors since the previous heartbeat. A count seen for the first
    time is a baseline (0 new); a count that went down was reset, so all of it is new.
    Returns (xid, ecc) per GPU and the running counts to keep.
    """
    deltas: list[tuple[int, int]] = []
    after: dict[str, list[int]] = {}
    for g in gpus:
        key = str(g["index"])
        prev = before.get(key)
        xid = g["xid_errors"] or 0
        ecc = g["ecc_errors"]
        new_xid = 0 if prev is None else (xid - prev[0] if xid >= prev[0] else xid)
        if ecc is None:
            new_ecc, ecc = 0, (prev[1] if prev else 0)
        else:
            new_ecc = 0 if prev is None else (ecc - prev[1] if ecc >= prev[1] else ecc)
        # A GPU that fell off the bus is unusable until fixed: one XID (79) per heartbeat.
        deltas.append((new_xid + (1 if g["lost"] else 0), new_ecc))
        after[key] = [xid, ecc]
    return deltas, after


def _zero(value: float | None) -> float:
    return 0.0 if value is None else value


def to_heartbeat(
    doc: dict[str, Any], received_at: float, totals: Mapping[str, list[int]]
) -> tuple[Heartbeat, dict[str, list[int]]]:
    """Check what a schema cannot say; build the engine's Heartbeat and the running counts."""
    sent_at = doc["sent_at"]
    if sent_at > received_at + FUTURE_S:
        raise Invalid(
            "sent_at", f"{sent_at - received_at:.0f} s in the future (at most {FUTURE_S:.0f} s)"
        )
    if sent_at < received_at - PAST_S:
        raise Invalid(
            "sent_at", f"{received_at - sent_at:.0f} s in the past (at most {PAST_S:.0f} s)"
        )
    seen: set[int] = set()
    for i, g in enumerate(doc["gpus"]):
        used, total = g["mem_used_mb"], g["mem_total_mb"]
        if used is not None and total is not None and used > total:
            raise Invalid(f"gpus[{i}].mem_used_mb", f"{used:g} MB used > {total:g} MB total")
        if g["index"] in seen:
            raise Invalid(f"gpus[{i}].index", f"GPU index {g['index']} appears twice")
        seen.add(g["index"])
    deltas, after = error_deltas(doc["gpus"], totals)
    gpus = tuple(
        GpuSample(
            g["index"],
            g["uuid"] or "",
            g["name"] or "",
            _zero(g["util_pct"]),
            _zero(g["mem_used_mb"]),
            _zero(g["mem_total_mb"]),
            _zero(g["temp_c"]),
            _zero(g["power_w"]),
            tuple(g["throttle_reasons"] or ()),
            ecc,
            xid,
        )
        for g, (xid, ecc) in zip(doc["gpus"], deltas, strict=True)
    )
    s = doc["server"]
    server = (
        None
        if s is None
        else ServerSample(
            s["kind"],
            s["requests_running"] or 0,
            s["requests_waiting"] or 0,
            _zero(s["kv_cache_usage"]),
            _zero(s["tokens_per_s"]),
            _zero(s["ttft_p50_ms"]),
            _zero(s["ttft_p99_ms"]),
            tuple(s["models_loaded"] or ()),
            output_histograms(s["output_tokens"]),
        )
    )
    p = doc["probe"]
    probe = None if p is None else ProbeSample(p["ok"], _zero(p["latency_ms"]))
    return Heartbeat(doc["endpoint"], doc["seq"], sent_at, received_at, gpus, server, probe), after


def output_histograms(doc: Mapping[str, Any] | None) -> tuple[OutputHistogram, ...]:
    """Turn a validated ``server.output_tokens`` into the engine's histograms."""
    if not doc:
        return ()
    return tuple(
        OutputHistogram(model, tuple(h["le"]), tuple(h["counts"]), h["count"])
        for model, h in doc.items()
    )


def parse_heartbeat(body: bytes) -> dict[str, Any]:
    """Parse and validate one heartbeat body; raise DomainError (400/413) naming the field."""
    if len(body) > MAX_BODY_BYTES:
        raise rejected(
            "too_large", 413, f"heartbeat body larger than {MAX_BODY_BYTES} bytes", code="too_large"
        )
    try:
        doc: dict[str, Any] = validate(HEARTBEAT, parse_json(body), "", times=_time)
    except Invalid as exc:
        raise _invalid(exc) from None
    return doc


def _invalid(exc: Invalid) -> DomainError:
    reason = "malformed_json" if exc.field == "body" else "invalid"
    return rejected(reason, 400, exc.message, exc.field)


def _time(value: Any, path: str) -> float:
    """Read ``sent_at``: seconds since the epoch or an ISO 8601 string."""
    if isinstance(value, str) and len(value) > 40:
        raise Invalid(path, "at most 40 characters")
    try:
        seconds = parse_iso8601(value)
    except (ValueError, TypeError, OverflowError):
        raise Invalid(path, "expected seconds since the epoch or an ISO 8601 time") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise Invalid(path, "expected a finite number")
    return seconds


def endpoint_ref(view: snapshot.FleetView, name: str) -> snapshot.EndpointRef:
    """Return the endpoint a heartbeat names; refuse an unknown one (400)."""
    global _interval_s
    ref = view.endpoints.get(name)
    if ref is None:
        raise rejected("unknown_endpoint", 400, f"unknown endpoint {name!r}", "endpoint")
    _interval_s = view.fleet.failover.heartbeat_interval_s
    return ref


def known_binding(
    view: snapshot.FleetView, token: AgentToken, ref: snapshot.EndpointRef
) -> bool | None:
    """Whether the token may report for the endpoint, if known without the database."""
    allowed = view.bindings.get((token.pk, ref.pk))
    if allowed is None and token.region_id is not None and token.region_id == ref.region_pk:
        return True
    return allowed


def authorise(view: snapshot.FleetView, token: AgentToken, ref: snapshot.EndpointRef) -> None:
    """Refuse (403) an endpoint the token is not bound to; may ask the database once per view."""
    allowed = known_binding(view, token, ref)
    if allowed is None:
        allowed = token.may_report(EndpointRow(pk=ref.pk, region_id=ref.region_pk))
        view.bindings[(token.pk, ref.pk)] = allowed
    if not allowed:
        raise rejected(
            "foreign_endpoint",
            403,
            f"this agent token may not report for endpoint {ref.endpoint.name!r}",
            "endpoint",
            code="permission_denied",
        )


def bound_endpoint(token: AgentToken, name: str) -> snapshot.EndpointRef:
    """Return the endpoint an agent token reports for; refuse unknown or foreign ones."""
    view = snapshot.current()
    ref = endpoint_ref(view, name)
    authorise(view, token, ref)
    return ref


def needs_totals(gpus: list[dict[str, Any]]) -> bool:
    """Tell whether the error deltas depend on the previous running counts.

    All-zero counts give zero deltas and zero running counts whatever came before, so the
    common healthy heartbeat skips reading them (one Redis round trip fewer).
    """
    return any(g["xid_errors"] or g["ecc_errors"] is None or g["ecc_errors"] for g in gpus)


def ingest(token: AgentToken, body: bytes, now: float) -> IngestResult:
    """Validate, authorise and store one heartbeat and its history row; return the reply."""
    doc = parse_heartbeat(body)
    view = snapshot.current()
    authorise(view, token, ref := endpoint_ref(view, doc["endpoint"]))
    result = accept(view, ref, doc, now)
    if result.sample is not None:
        try:
            store_samples([result.sample])
        except DatabaseError:  # kept and written once the database answers
            late_history.submit(result.sample)
    return result


def accept(
    view: snapshot.FleetView, ref: snapshot.EndpointRef, doc: dict[str, Any], now: float
) -> IngestResult:
    """Store a validated, authorised heartbeat in the hot state (no database access).

    The history row, when this is the first heartbeat of its bucket, is returned for the
    caller to store (``store_samples``), in the request or in the background.
    """
    put = prepare(ref, doc, now)
    return conclude(view, ref, put, hotstate.get().put_heartbeat(*put))


def prepare(ref: snapshot.EndpointRef, doc: dict[str, Any], now: float) -> hotstate.HeartbeatPut:
    """Check what the schema cannot; return the heartbeat, its bucket and the running counts."""
    store = hotstate.get()
    before = store.error_totals(ref.endpoint.name) if needs_totals(doc["gpus"]) else {}
    try:
        hb, totals = to_heartbeat(doc, now, before)
        session = doc.get("session") or ""
        if not SESSION_CHARS.issuperset(session):
            raise Invalid("session", "only letters, digits, '-' and '_'")
    except Invalid as exc:
        raise _invalid(exc) from None
    order = hotstate.Order(session, _interval_s)
    return hb, int(now // SAMPLE_EVERY_S) * SAMPLE_EVERY_S, totals, order


def conclude(
    view: snapshot.FleetView,
    ref: snapshot.EndpointRef,
    put: hotstate.HeartbeatPut,
    result: hotstate.PutResult,
) -> IngestResult:
    """Count the outcome of a compare-and-set and build the reply (and the history row)."""
    if not result.accepted:
        metrics.count_ingest(False, "stale_seq")
        return IngestResult(False, {"accepted": False, "reason": "stale seq"})
    metrics.count_ingest(True, "ok")
    reply: dict[str, Any] = {
        "accepted": True,
        "interval_s": view.fleet.failover.heartbeat_interval_s,
    }
    if result.drill is not None:
        reply["drill"] = result.drill
    hb, bucket = put[0], put[1]
    sample = history_row(ref.pk, bucket, hb) if result.new_bucket else None
    return IngestResult(True, reply, sample)


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
