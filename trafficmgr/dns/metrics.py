"""Counters of the DNS server, kept as plain dicts (a Prometheus exporter reads them).

Queries answered from the reply cache are counted in bulk: each cached reply names a
signature (the events, response code and query type its query counts, registered once) and
a hit adds one to that signature's tally, a single list increment. ``as_dict`` folds the
tallies into the totals, so readers see every query counted as if it had been answered the
slow way, and no flush is needed (the serving thread only ever increments; readers only read).

``latency`` counts how long the server spent on each message (UDP: reading the datagram,
answering and sending the reply, one clock reading per datagram; TCP: answering), per bucket
of ``LATENCY_BOUNDS_S`` (Prometheus' ``le`` upper bounds; the last count is ``+Inf``'s), and
``latency_sum`` adds them up. Time a datagram waited in the socket's buffer is not in it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import dns.rdatatype

from trafficmgr.dns.wire import RCODE_NAMES

Signature = tuple[tuple[str, ...], str | None, str | None]

# Query types counted by name; anything else is counted as "other", so that a flood of
# random types cannot grow the counters without bound.
_COUNTED_TYPES = "A AAAA TXT SOA NS ANY HINFO MX CNAME PTR SRV HTTPS SVCB DS DNSKEY CAA AXFR IXFR"
QTYPE_NAMES: dict[int, str] = {
    int(dns.rdatatype.from_text(t)): t for t in _COUNTED_TYPES.split(" ")
}

MAX_SIGNATURES = 4096  # distinct (events, rcode, qtype) combinations; a few dozen in practice
# A cached answer takes a few microseconds, a rendered one tens to hundreds.
LATENCY_BOUNDS_S = (
    5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0
)  # fmt: skip

EVENTS = (
    "queries",  # every datagram or TCP message received
    "udp",
    "tcp",
    "answered",
    "dropped",  # not answered: too short, a response, rate-limited
    "formerr",
    "badvers",
    "refused",
    "nxdomain",
    "nodata",
    "notimp",
    "truncated",  # answered with TC=1 because the answer did not fit
    "rrl_limited_answer",  # responses over the rate limit (dropped or slipped), by class
    "rrl_limited_nxdomain",
    "rrl_limited_error",
    "rrl_dropped",
    "rrl_slipped",
    "cache_hits",
    "cache_misses",
    "cache_carried",  # a basis of cached replies found to hold under a new table: kept
    "cache_changed",  # a basis found changed by a new table: its replies are rendered again
    "cache_repicked",  # a reply of a changed basis whose region the new weights keep: kept
    "cache_resets",  # a fleet whose zone answers differently emptied the caches
    "fallback_parses",
    "ecs",
    "udp_errors",  # a datagram could not be read or its reply not sent
    "tcp_connections",
    "tcp_rejected",  # refused: ``tcp_max_connections`` open already
    "tcp_rejected_per_client",  # refused: ``tcp_max_per_client`` open from its client already
    "tcp_closed_idle",  # no complete query for ``tcp_idle_timeout_s``
    "tcp_closed_partial",  # a message begun not whole within ``tcp_message_timeout_s``
    "tcp_closed_unread",  # the client did not read its answers
    "tcp_closed_garbage",  # it sent something that is not DNS
    "table_swaps",
    "table_rejected",
    "table_source_errors",
    "table_persist_errors",
    "redis_errors",
    "fleet_updates",  # a changed fleet read from the fleet source and served
    "fleet_errors",  # the fleet source failed or held no regions; the fleet stayed
)


class Counters:
    """Counters by event, by response code and by query type."""

    __slots__ = (
        "_index",
        "_signatures",
        "events",
        "hits",
        "latency",
        "latency_sum",
        "qtype",
        "rcode",
    )

    def __init__(self) -> None:
        self.events: dict[str, int] = dict.fromkeys(EVENTS, 0)
        self.rcode: dict[str, int] = {}
        self.qtype: dict[str, int] = {}
        self.hits: list[int] = []  # per signature: queries counted in bulk
        self.latency: list[int] = [0] * (len(LATENCY_BOUNDS_S) + 1)  # per bucket, +Inf last
        self.latency_sum = 0.0
        self._signatures: list[Signature] = []
        self._index: dict[Signature, int] = {}

    def add(self, event: str, n: int = 1) -> None:
        """Count ``n`` occurrences of ``event``."""
        self.events[event] = self.events.get(event, 0) + n

    def observe(self, seconds: float) -> None:
        """Count one message answered in ``seconds``."""
        self.latency[bisect_left(LATENCY_BOUNDS_S, seconds)] += 1
        self.latency_sum += seconds

    def latency_histogram(self) -> dict[str, list[float] | list[int] | float]:
        """Return a copy of the answer times: ``le`` bounds, per-bucket ``counts``, ``sum``."""
        return {
            "le": list(LATENCY_BOUNDS_S),
            "counts": list(self.latency),
            "sum": self.latency_sum,
        }

    def response(self, rcode: int) -> None:
        """Count one response by its code."""
        name = RCODE_NAMES.get(rcode, "other")
        self.rcode[name] = self.rcode.get(name, 0) + 1

    def query_type(self, qtype: int) -> None:
        """Count one query by its type."""
        name = QTYPE_NAMES.get(qtype, "other")
        self.qtype[name] = self.qtype.get(name, 0) + 1

    def count(self, events: Sequence[str], rcode: str | None, qtype: str | None) -> None:
        """Count one query that moved ``events`` and was answered ``rcode`` (names)."""
        counted = self.events
        for event in events:
            counted[event] = counted.get(event, 0) + 1
        if rcode is not None:
            self.rcode[rcode] = self.rcode.get(rcode, 0) + 1
        if qtype is not None:
            self.qtype[qtype] = self.qtype.get(qtype, 0) + 1

    def signature(self, events: Sequence[str], rcode: str | None, qtype: str | None) -> int | None:
        """Return the index in ``hits`` of a combination of counts; None when too many exist."""
        key = (tuple(events), rcode, qtype)
        index = self._index.get(key)
        if index is None:
            if len(self._signatures) >= MAX_SIGNATURES:
                return None
            index = len(self._signatures)
            self._signatures.append(key)
            self.hits.append(0)  # before the index is published, so hits[index] exists
            self._index[key] = index
        return index

    def as_dict(self) -> dict[str, int | dict[str, int]]:
        """Return a copy: the event counters plus ``rcode`` and ``qtype`` breakdowns."""
        events = dict(self.events)
        rcodes = dict(self.rcode)
        qtypes = dict(self.qtype)
        for (names, rcode, qtype), n in zip(list(self._signatures), list(self.hits), strict=False):
            if not n:
                continue
            for event in names:
                events[event] = events.get(event, 0) + n
            if rcode is not None:
                rcodes[rcode] = rcodes.get(rcode, 0) + n
            if qtype is not None:
                qtypes[qtype] = qtypes.get(qtype, 0) + n
        out: dict[str, int | dict[str, int]] = dict(events)
        out["rcode"] = rcodes
        out["qtype"] = qtypes
        return out
