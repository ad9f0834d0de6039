"""The GeoDNS server's counters as Prometheus text, served over HTTP (``--metrics HOST:PORT``).

Every worker process keeps its own counters (``metrics.Counters``) and serves its own table,
so a scrape must ask each of them: the process that owns the metrics port (the single server,
or the parent of ``--workers N``) collects one *snapshot* per worker (a plain dict, see
``snapshot``) and renders them all, labelled ``worker="0"``, ``"1"``, ... . A worker that does
not answer is shown as ``trafficmgr_dns_worker_up 0``, never as counters that went back to
zero. ``sum by (...)`` in PromQL gives the server's totals. The HTTP side and the pipes to the
workers are in ``scrape.py``; this module only turns snapshots into text.

What it exports, beside every event counter of ``metrics.EVENTS``: answers by query type and
by response code, refusals, rate-limited responses (dropped or slipped, and by class), the
keys the rate limiter tracks, truncated answers, TCP connections refused (in all or per
client) and closed by the server (idle, partial message, unread answers, not DNS), the
answer-time histogram, and the table served: its age (now - its ``generated_at``) and whether
it is *published* (from Redis, the table file or the control loop in process), *static* (the
fleet alone, before any table) or *last-good* (read back from the state file, or a Redis table
kept while Redis is unreachable).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from trafficmgr.dns.metrics import Counters
from trafficmgr.dns.sources import RedisSource
from trafficmgr.dns.tables import TableStore


class Serving(Protocol):
    """What a snapshot reads of a server (``server.DnsServer``)."""

    @property
    def metrics(self) -> dict[str, Any]: ...

    @property
    def counters(self) -> Counters: ...

    @property
    def store(self) -> TableStore: ...

    @property
    def redis(self) -> RedisSource | None: ...


TABLE_STATES = ("published", "static", "last-good")
PUBLISHED = frozenset({"redis", "table-file", "setter"})
RRL_CLASSES = ("answer", "nxdomain", "error")
TCP_REFUSALS = {"max_connections": "tcp_rejected", "per_client": "tcp_rejected_per_client"}
TCP_CLOSES = ("idle", "partial", "unread", "garbage")
_OWN_METRICS = {
    "queries",
    "udp",
    "tcp",
    "refused",
    "rrl_dropped",
    "rrl_slipped",
    "truncated",
    *(f"rrl_limited_{c}" for c in RRL_CLASSES),
    *TCP_REFUSALS.values(),
    *(f"tcp_closed_{c}" for c in TCP_CLOSES),
}

Snapshot = dict[str, Any]


def table_state(source: str, redis_connected: bool | None) -> str:
    """Return published, static or last-good for a table's source."""
    if source == "static":
        return "static"
    if source == "state-file" or (source == "redis" and redis_connected is False):
        return "last-good"
    return "published" if source in PUBLISHED else "last-good"


def snapshot(server: Serving) -> Snapshot:
    """Return one server's counters and table, as plain data (picklable, for a pipe)."""
    out = dict(server.metrics)
    out["latency"] = server.counters.latency_histogram()
    served = server.store.snapshot
    out["table_generated_at"] = served.table.generated_at
    redis = server.redis
    out["table_state"] = table_state(served.source, None if redis is None else redis.connected)
    return out


def render(snapshots: Sequence[tuple[str, Snapshot | None]], now: float | None = None) -> str:
    """Render worker snapshots (``None``: the worker did not answer) as Prometheus text."""
    at = time.time() if now is None else now
    metrics: dict[str, tuple[str, str, list[str]]] = {}

    def add(name: str, kind: str, text: str, labels: Mapping[str, str], value: float) -> None:
        family = _family(name) if kind == "histogram" else name  # one block per family
        entry = metrics.setdefault(family, (kind, text, []))
        entry[2].append(f"{name}{_labels(labels)} {_number(value)}")

    for worker, snap in snapshots:
        w = {"worker": worker}
        add(
            "trafficmgr_dns_worker_up",
            "gauge",
            "1 if the worker answered this scrape.",
            w,
            0 if snap is None else 1,
        )
        if snap is not None:
            _worker(add, w, snap, at)
    lines: list[str] = []
    for family, (kind, text, samples) in metrics.items():
        lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}", *samples]
    return "\n".join(lines) + "\n"


def _family(name: str) -> str:
    """Return a histogram sample's family name (without ``_bucket``, ``_sum``, ``_count``)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


Add = Callable[[str, str, str, Mapping[str, str], float], None]


def _worker(add: Add, w: Mapping[str, str], snap: Snapshot, now: float) -> None:
    """Add one worker's samples."""
    for transport in ("udp", "tcp"):
        add(
            "trafficmgr_dns_queries_total",
            "counter",
            "DNS messages received, by transport.",
            {**w, "transport": transport},
            snap.get(transport, 0),
        )
    for qtype, n in sorted(snap.get("qtype", {}).items()):
        add(
            "trafficmgr_dns_answers_by_qtype_total",
            "counter",
            "Queries answered, by type.",
            {**w, "qtype": qtype},
            n,
        )
    for rcode, n in sorted(snap.get("rcode", {}).items()):
        add(
            "trafficmgr_dns_answers_by_rcode_total",
            "counter",
            "Responses sent, by response code.",
            {**w, "rcode": rcode},
            n,
        )
    add(
        "trafficmgr_dns_refused_total",
        "counter",
        "Queries refused (not our zone, transfers).",
        w,
        snap.get("refused", 0),
    )
    for action in ("dropped", "slipped"):
        add(
            "trafficmgr_dns_rate_limited_total",
            "counter",
            "Queries over the response rate limit: dropped, or answered truncated (slipped).",
            {**w, "action": action},
            snap.get(f"rrl_{action}", 0),
        )
    for cls in RRL_CLASSES:
        add(
            "trafficmgr_dns_rrl_limited_total",
            "counter",
            "Responses over the response rate limit, by class (answer, nxdomain, error).",
            {**w, "class": cls},
            snap.get(f"rrl_limited_{cls}", 0),
        )
    add(
        "trafficmgr_dns_truncated_total",
        "counter",
        "Answers sent truncated (TC=1).",
        w,
        snap.get("truncated", 0),
    )
    _tcp(add, w, snap)
    for event in sorted(k for k, v in snap.items() if isinstance(v, int) and k not in _SKIP):
        add(
            "trafficmgr_dns_events_total",
            "counter",
            "Every other counter of the server.",
            {**w, "event": event},
            snap[event],
        )
    _latency(add, w, snap.get("latency") or {})
    _table(add, w, snap, now)


_SKIP = _OWN_METRICS | {
    "cache_entries",
    "reply_cache_entries",
    "tcp_open",
    "tcp_clients",
    "rrl_keys",
}


def _tcp(add: Add, w: Mapping[str, str], snap: Snapshot) -> None:
    """Add the TCP connections refused and closed by the server, by reason."""
    for reason, event in TCP_REFUSALS.items():
        add(
            "trafficmgr_dns_tcp_refused_total",
            "counter",
            "TCP connections refused: too many open in all, or from one client.",
            {**w, "reason": reason},
            snap.get(event, 0),
        )
    for reason in TCP_CLOSES:
        add(
            "trafficmgr_dns_tcp_closed_total",
            "counter",
            "TCP connections the server closed: idle, a message not whole in time (partial), "
            "answers not read (unread), not DNS (garbage).",
            {**w, "reason": reason},
            snap.get(f"tcp_closed_{reason}", 0),
        )


def _latency(add: Add, w: Mapping[str, str], hist: Mapping[str, Any]) -> None:
    """Add the answer-time histogram (cumulative buckets, as Prometheus wants them)."""
    name = "trafficmgr_dns_answer_duration_seconds"
    text = "Time the server spent on a message, from reading it to sending the reply."
    running = 0
    counts = list(hist.get("counts", []))
    for bound, n in zip([*hist.get("le", []), math.inf], counts, strict=False):
        running += n
        add(f"{name}_bucket", "histogram", text, {**w, "le": _number(bound)}, running)
    add(f"{name}_sum", "histogram", text, w, float(hist.get("sum", 0.0)))
    add(f"{name}_count", "histogram", text, w, sum(counts))


def _table(add: Add, w: Mapping[str, str], snap: Snapshot, now: float) -> None:
    """Add what the worker knows of the table it serves."""
    generated = snap.get("table_generated_at")
    if isinstance(generated, int | float):
        add(
            "trafficmgr_dns_table_age_seconds",
            "gauge",
            "Age of the routing table served (now - its generated_at).",
            w,
            max(0.0, now - generated),
        )
    state = snap.get("table_state", "")
    for name in TABLE_STATES:
        add(
            "trafficmgr_dns_table_source",
            "gauge",
            "Where the table served comes from: published, static or last-good (1 = this one).",
            {**w, "source": name},
            1 if state == name else 0,
        )
    add(
        "trafficmgr_dns_table_info",
        "gauge",
        "The table served: version and origin.",
        {
            **w,
            "version": str(snap.get("table_version", "")),
            "origin": str(snap.get("table_source", "")),
        },
        1,
    )
    for cache, key in (("sections", "cache_entries"), ("replies", "reply_cache_entries")):
        add(
            "trafficmgr_dns_cache_entries",
            "gauge",
            "Entries in the answer caches.",
            {**w, "cache": cache},
            snap.get(key, 0),
        )
    add(
        "trafficmgr_dns_tcp_connections_open",
        "gauge",
        "TCP connections open now.",
        w,
        snap.get("tcp_open", 0),
    )
    add(
        "trafficmgr_dns_tcp_clients_open",
        "gauge",
        "Clients (IPv4 addresses, IPv6 /64s) holding a TCP connection now.",
        w,
        snap.get("tcp_clients", 0),
    )
    add(
        "trafficmgr_dns_rrl_keys",
        "gauge",
        "Keys (client prefix x response) the response rate limiter tracks now.",
        w,
        snap.get("rrl_keys", 0),
    )


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))
