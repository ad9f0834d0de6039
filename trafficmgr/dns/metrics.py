"""Counters of the DNS server, kept as plain dicts (a Prometheus exporter reads them)."""

from __future__ import annotations

import dns.rdatatype

from trafficmgr.dns.wire import RCODE_NAMES

# Query types counted by name; anything else is counted as "other", so that a flood of
# random types cannot grow the counters without bound.
_COUNTED_TYPES = "A AAAA TXT SOA NS ANY HINFO MX CNAME PTR SRV HTTPS SVCB DS DNSKEY CAA AXFR IXFR"
QTYPE_NAMES: dict[int, str] = {
    int(dns.rdatatype.from_text(t)): t for t in _COUNTED_TYPES.split(" ")
}

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
    "rrl_dropped",
    "rrl_slipped",
    "cache_hits",
    "cache_misses",
    "fallback_parses",
    "ecs",
    "udp_errors",  # a datagram could not be read or its reply not sent
    "tcp_connections",
    "tcp_rejected",
    "table_swaps",
    "table_rejected",
    "table_source_errors",
    "table_persist_errors",
    "redis_errors",
)


class Counters:
    """Counters by event, by response code and by query type."""

    __slots__ = ("events", "qtype", "rcode")

    def __init__(self) -> None:
        self.events: dict[str, int] = dict.fromkeys(EVENTS, 0)
        self.rcode: dict[str, int] = {}
        self.qtype: dict[str, int] = {}

    def add(self, event: str, n: int = 1) -> None:
        """Count ``n`` occurrences of ``event``."""
        self.events[event] = self.events.get(event, 0) + n

    def response(self, rcode: int) -> None:
        """Count one response by its code."""
        name = RCODE_NAMES.get(rcode, "other")
        self.rcode[name] = self.rcode.get(name, 0) + 1

    def query_type(self, qtype: int) -> None:
        """Count one query by its type."""
        name = QTYPE_NAMES.get(qtype, "other")
        self.qtype[name] = self.qtype.get(name, 0) + 1

    def as_dict(self) -> dict[str, int | dict[str, int]]:
        """Return a copy: the event counters plus ``rcode`` and ``qtype`` breakdowns."""
        out: dict[str, int | dict[str, int]] = dict(self.events)
        out["rcode"] = dict(self.rcode)
        out["qtype"] = dict(self.qtype)
        return out
