"""Answer one DNS message: bytes in, bytes (or None: stay silent) out.

This is the whole server minus the sockets, so tests call it as a function. A datagram first
meets the reply cache (``replies``): a query whose bytes were answered before under the same
table gets that reply back with its own ID, and nothing else is done (but the rate limiter).
Otherwise, the slow way: parse (``wire``), refuse what is malformed or not ours, then answer
from the caches of rendered sections, rendering only on a miss. Routed names take two steps:
the candidate regions for (name, type, client country, continent), which is all the routing
table looks at, are cached; the pick among them is computed from the client's prefix bucket
(a CRC and a bisection); the rendered sections are cached by the regions picked (and, for
TXT, the client's place). So a few thousand client prefixes share a handful of rendered
answers.

A new table does not empty the caches (``carry``). Client locations never depended on it.
Rendered A/AAAA sections depend on the regions picked and the zone only, so they are kept
across tables; what names the table (TXT) or its SOA serial is kept per table; candidates
are found again per table. Cached replies are checked against the new table by their basis
when next asked for, and only those it changes are rendered again. A fleet whose zone
answers alike (same names, addresses, TTL) counts as a table swap; another empties them all.

The query ID, its question (with the client's letter case), the ECS option with its scope
and the EDNS buffer size are applied per query when the header and OPT record are written
around the cached sections; a message that does not fit the client's buffer goes out
truncated (TC=1) so the client retries over TCP. The reply cache keys on all of those, so
its replies are byte for byte what the slow way gives. TCP always takes the slow way.

What each query counts is collected as it is answered (``Outcome``) and counted once; a
cached reply remembers it, so a hit counts the same events with one increment.

The rate limiter (``ratelimit``) is keyed by the response, so a datagram meets it once its
reply is known: a cached reply carries its identity (name and type, NXDOMAIN or error), a
rendered one is given it. A limited reply is counted as limited instead of answered, and
dropped or replaced by a bare truncated one (slip). TCP is never limited."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import dns.rdatatype

from trafficmgr.dns.carry import Basis, Route, SerialBasis, picks_of, same_pick
from trafficmgr.dns.choice import mask_prefix, prefix_bucket
from trafficmgr.dns.config import MIN_UDP_PAYLOAD, ServerConfig
from trafficmgr.dns.metrics import QTYPE_NAMES, Counters
from trafficmgr.dns.ratelimit import ALLOW, CLASS_NAMES, DROP, RateLimiter, identity_of
from trafficmgr.dns.replies import Entry, ReplyCache, source_bucket
from trafficmgr.dns.routed import Candidates, RoutedAnswers
from trafficmgr.dns.tables import Snapshot, TableStore
from trafficmgr.dns.wire import (
    BADVERS,
    FLAG_AA,
    FLAG_CD,
    FLAG_QR,
    FLAG_RD,
    FLAG_TC,
    FORMERR,
    HEADER,
    NOERROR,
    NOTIMP,
    NXDOMAIN,
    RCODE_NAMES,
    REFUSED,
    SERVFAIL,
    Query,
    opt_record,
    parse_query,
)
from trafficmgr.dns.zone import NameKind, Rendered, ZoneData, qname_of, render, rfc8482_rrset
from trafficmgr.routing.types import ClientLocation

log = logging.getLogger(__name__)

A = int(dns.rdatatype.A)
AAAA = int(dns.rdatatype.AAAA)
TXT = int(dns.rdatatype.TXT)
SOA = int(dns.rdatatype.SOA)
NS = int(dns.rdatatype.NS)
ANY = int(dns.rdatatype.ANY)
ZONE_TRANSFERS = frozenset({int(dns.rdatatype.AXFR), int(dns.rdatatype.IXFR)})
ROUTED_TYPES = frozenset({A, AAAA, TXT})
CLASS_IN = 1
V4_GRANULARITY = 24  # client prefixes that share one answer (RFC 7871 §11.1 suggests these)
V6_GRANULARITY = 56
MAX_TCP_MESSAGE = 65535
LOCATION_CACHE = 65_536

REFUSED_ANSWER = Rendered(REFUSED, False, 0, 0, 0, b"")
_MAPPED = b"\x00" * 10 + b"\xff\xff"
_NOT_ON_A_HIT = frozenset({"cache_hits", "cache_misses", "fallback_parses"})
_EVENT_OF_RCODE = {
    FORMERR: "formerr",
    BADVERS: "badvers",
    REFUSED: "refused",
    NXDOMAIN: "nxdomain",
    NOTIMP: "notimp",
}


class Locating(Protocol):
    """What the responder needs of the engine's ``Locator``."""

    def locate_with_scope(
        self, ip: str, prefix_len: int | None = None
    ) -> tuple[ClientLocation, int]: ...


@dataclass(slots=True)
class Outcome:
    """One query's reply and what it counts (event names, response code and query type)."""

    reply: bytes | None
    marks: list[str]
    rcode: str | None = None
    qtype: str | None = None
    cacheable: bool = False  # an ordinary answer: the same query bytes get the same reply
    uses_source: bool = False  # located by the source address (no ECS): keyed by its prefix
    basis: Basis | None = None  # what the reply rests on besides the query and zone (``carry``)
    bucket: int = 0  # the client prefix bucket a region was picked by, if among several
    query: Query | None = None


class Responder:
    """Turns query bytes into response bytes; owns the caches and the rate limiter."""

    def __init__(
        self,
        zone: ZoneData,
        store: TableStore,
        config: ServerConfig,
        counters: Counters,
        locator: Locating | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.zone = zone
        self.store = store
        self.config = config
        self.counters = counters
        self.locator = locator
        self.limiter = RateLimiter(
            config.rrl_rate,
            config.rrl_burst,
            config.rrl_slip,
            clock,
            nxdomain_rate=config.rrl_nxdomain_rate,
            error_rate=config.rrl_error_rate,
            window_s=config.rrl_window_s,
            ipv4_prefix=config.rrl_ipv4_prefix,
            ipv6_prefix=config.rrl_ipv6_prefix,
            exempt=config.rrl_exempt,
        )
        self.routed = RoutedAnswers(config.answers)
        self.replies = ReplyCache(config.cache_size)
        self._hits = counters.hits
        # Rendered sections: by zone (A/AAAA naming regions), and by table (the rest).
        self._cache: OrderedDict[tuple[object, ...], Rendered] = OrderedDict()
        self._by_table: OrderedDict[tuple[object, ...], Rendered] = OrderedDict()
        self._candidates: dict[tuple[object, ...], tuple[Candidates, Route]] = {}
        self._where: dict[bytes, tuple[ClientLocation, int]] = {}
        self._max_udp = max(MIN_UDP_PAYLOAD, config.max_udp_payload)
        self._snapshot = store.snapshot  # the table served: the reply cache's generation
        self._zone_basis = Basis(0)
        self._serial_basis = SerialBasis(0, -1)
        self._table_basis = Basis(0)
        # The bases replies name, by id (oldest used first out), and those true right now.
        self._bases: OrderedDict[int, Basis] = OrderedDict()
        self._bases_limit = 2 * max(1, config.cache_size)
        self._valid: set[int] = set()

    @property
    def cache_entries(self) -> int:
        """Return how many rendered answers are cached."""
        return len(self._cache) + len(self._by_table)

    def handle(self, wire: bytes, source: str, tcp: bool = False) -> bytes | None:
        """Answer one message from ``source`` (an IP address); None means send nothing."""
        if not tcp:
            return self.handle_udp(wire, source)
        outcome = self._respond(wire, source, True)
        self.counters.count(outcome.marks, outcome.rcode, outcome.qtype)
        return outcome.reply

    def handle_udp(self, wire: bytes, source: str) -> bytes | None:
        """Answer a datagram; a query seen before gets its cached reply with this query's ID."""
        limiter = self.limiter
        replies = self.replies
        if replies.snapshot is not self.store.snapshot or replies.zone is not self.zone:
            self._follow()
        entry = replies.fixed.get(wire[2:])
        if entry is None and replies.by_source:
            entry = replies.get(wire[2:], source)
        if entry is not None and entry[2] not in self._valid:
            entry = self._recheck(wire[2:], source, entry)
        if entry is not None:
            if limiter.enabled and (verdict := limiter.check(source, entry[4])) != ALLOW:
                return self._limited(wire, verdict, entry[4], None)
            self._hits[entry[1]] += 1
            return wire[:2] + entry[0]
        outcome = self._respond(wire, source, False)
        reply = outcome.reply
        if reply is None:
            self.counters.count(outcome.marks, outcome.rcode, outcome.qtype)
            return None
        query = outcome.query
        identity = identity_of(
            outcome.rcode, query.qname if query else b"", query.qtype if query else 0
        )
        if outcome.cacheable and len(wire) > 2:
            self._keep(wire, source, outcome, reply, identity)
        if limiter.enabled and (verdict := limiter.check(source, identity)) != ALLOW:
            return self._limited(wire, verdict, identity, outcome.query)
        self.counters.count(outcome.marks, outcome.rcode, outcome.qtype)
        return reply

    def _limited(
        self, wire: bytes, verdict: int, identity: bytes, query: Query | None
    ) -> bytes | None:
        """Count a response over the rate limit; drop it, or send it bare and truncated."""
        marks = ["queries", "udp", "rrl_limited_" + CLASS_NAMES.get(identity[0], "error")]
        if verdict == DROP:
            marks += ("rrl_dropped", "dropped")
            self.counters.count(marks, None, None)
            return None
        query = query if query is not None else parse_query(wire)
        outcome = Outcome(None, marks)
        outcome.marks.append("rrl_slipped")
        if query is not None:
            outcome.reply = self._bare(query, query.rcode, outcome, truncated=True)
        self.counters.count(outcome.marks, outcome.rcode, None)
        return outcome.reply

    def _keep(
        self, wire: bytes, source: str, outcome: Outcome, reply: bytes, identity: bytes
    ) -> None:
        """Cache a reply with what a repeat of its query counts (a hit, not a render) and
        its identity for the rate limiter."""
        marks = [m for m in outcome.marks if m not in _NOT_ON_A_HIT]
        marks.append("cache_hits")
        signature = self.counters.signature(marks, outcome.rcode, outcome.qtype)
        if signature is not None and outcome.basis is not None:
            bucket = source_bucket(source) if outcome.uses_source else None
            self._register(outcome.basis)
            entry = (reply[2:], signature, outcome.basis.id, outcome.bucket, identity)
            self.replies.put(wire[2:], bucket, entry)

    def _register(self, basis: Basis) -> None:
        """Let replies name ``basis`` by its id; forget the least recently true past the bound."""
        bases = self._bases
        if basis.id in bases:
            return
        if len(bases) >= self._bases_limit:
            bases.popitem(last=False)  # its replies are rendered again when next asked for
        bases[basis.id] = basis
        if basis.valid_in == self.replies.generation:
            self._valid.add(basis.id)

    # --- following the table -------------------------------------------------------------

    def _follow(self) -> None:
        """Serve the store's table and the current zone, keeping what they do not change."""
        snapshot, zone, replies = self.store.snapshot, self.zone, self.replies
        served = replies.zone
        if served is zone or (isinstance(served, ZoneData) and served.answers == zone.answers):
            generation = replies.advance(snapshot, zone)
        else:
            generation = replies.reset(snapshot, zone)
            self._cache.clear()
            if served is not None:
                self.counters.add("cache_resets")
        self._snapshot = snapshot
        self._by_table.clear()
        self._candidates.clear()
        self._valid = set()
        self._zone_basis.renew(generation)
        self._mark_true(self._zone_basis)
        if self._serial_basis.serial == snapshot.serial:
            self._serial_basis.renew(generation)
            self._mark_true(self._serial_basis)
        else:
            self._serial_basis = SerialBasis(generation, snapshot.serial)
        self._table_basis = Basis(generation)

    def _mark_true(self, basis: Basis) -> None:
        """Serve the replies of ``basis`` as they are in this generation."""
        if basis.id in self._bases:
            self._bases.move_to_end(basis.id)
            self._valid.add(basis.id)

    def _recheck(self, key: bytes, source: str, entry: Entry) -> Entry | None:
        """Return a reply kept under an earlier table if the current one gives it too."""
        basis = self._bases.get(entry[2])
        if basis is None:
            return None  # forgotten (``_register``): render it again
        if self._still_true(basis):
            return entry
        if type(basis) is not Route or self.routed.answers != 1:
            return None
        _, route = self._candidates_of(basis.where, basis.model, basis.location, self._snapshot)
        if not same_pick(basis, route, entry[3]):
            return None
        self._register(route)
        entry = (entry[0], entry[1], route.id, entry[3], entry[4])  # the same bytes, new route
        self.replies.replace(key, source, entry)
        self.counters.add("cache_repicked")
        return entry

    def _still_true(self, basis: Basis) -> bool:
        """Check, once per generation, whether the replies resting on ``basis`` still hold."""
        generation = self.replies.generation
        if basis.checked_in == generation:
            return False  # checked, and found changed: its replies are being rendered again
        basis.checked_in = generation
        if type(basis) is Route:
            snapshot = self._snapshot
            if basis.serial is None or basis.serial == snapshot.serial:
                loc = basis.location
                candidates, route = self._candidates_of(basis.where, basis.model, loc, snapshot)
                if route.picks == basis.picks:
                    basis.valid_in = generation
                    self._mark_true(basis)
                    if basis.serial is None:  # new replies of this place share it
                        self._candidates[basis.where] = (candidates, basis)
                    self.counters.add("cache_carried")
                    return True
        self.counters.add("cache_changed")
        return False

    def _respond(self, wire: bytes, source: str, tcp: bool) -> Outcome:
        """Answer a message the slow way (parse, look up, render)."""
        outcome = Outcome(None, ["queries", "tcp" if tcp else "udp"])
        marks = outcome.marks
        query = parse_query(wire)
        if query is None:
            marks.append("dropped")
            return outcome
        outcome.query = query
        if query.via_fallback:
            marks.append("fallback_parses")
        if query.question:
            outcome.qtype = QTYPE_NAMES.get(query.qtype, "other")
        if query.rcode:
            outcome.reply = self._bare(query, query.rcode, outcome)
            return outcome
        if query.edns_version:  # we speak EDNS version 0 only (RFC 6891 §6.1.3)
            outcome.reply = self._bare(query, BADVERS, outcome)
            return outcome
        try:
            rendered, scope = self._answer(query, source, outcome)
        except Exception:  # a bug must cost one answer, never the server
            log.exception("failed to answer a query for %r", query.qname)
            outcome.uses_source = False
            outcome.reply = self._bare(query, SERVFAIL, outcome)
            return outcome
        outcome.reply = self._finish(query, rendered, scope, tcp, outcome)
        outcome.cacheable = not tcp and not query.via_fallback
        return outcome

    # --- answers -----------------------------------------------------------------------

    def _answer(self, query: Query, source: str, outcome: Outcome) -> tuple[Rendered, int]:
        """Return the rendered answer and the ECS scope it holds for."""
        replies = self.replies
        if replies.snapshot is not self.store.snapshot or replies.zone is not self.zone:
            self._follow()
        snapshot, zone = self._snapshot, self.zone
        outcome.basis = self._zone_basis
        if query.qclass != CLASS_IN or query.qtype in ZONE_TRANSFERS:
            return REFUSED_ANSWER, 0
        found = zone.classify(query.qname)
        if found is None:
            if not zone.contains(query.qname):
                return REFUSED_ANSWER, 0  # not our zone, and we never recurse
            return self._static(query, snapshot, zone, None, outcome), 0
        kind, model = found
        if kind is NameKind.ROUTED and query.qtype in ROUTED_TYPES:
            return self._routed(query, source, snapshot, zone, model, outcome)
        return self._static(query, snapshot, zone, kind, outcome), 0

    def _static(
        self,
        query: Query,
        snapshot: Snapshot,
        zone: ZoneData,
        kind: NameKind | None,
        outcome: Outcome,
    ) -> Rendered:
        """Answer what does not depend on the client: apex, nameserver, negative answers."""
        qtype = query.qtype
        glue = kind is NameKind.NAMESERVER and qtype in (A, AAAA) and bool(zone.glue.of(qtype))
        by_zone = glue or (
            kind is not None and (qtype == ANY or (kind is NameKind.APEX and qtype == NS))
        )
        outcome.basis = self._zone_basis if by_zone else self._serial_basis
        key = (query.qname, query.qtype)
        rendered = self._by_table.get(key)
        marks = outcome.marks
        if rendered is not None:
            marks.append("cache_hits")
            return rendered
        marks.append("cache_misses")
        question = query.qname + struct.pack("!HH", query.qtype, query.qclass)
        name = qname_of(question)
        if kind is None:
            rendered = render(question, NXDOMAIN, authority=[zone.negative_soa(snapshot.serial)])
        elif qtype == ANY:
            rendered = render(question, NOERROR, [rfc8482_rrset(name, zone.ttl)])
        elif kind is NameKind.APEX and qtype == SOA:
            rendered = render(question, NOERROR, [zone.soa(snapshot.serial)])
        elif kind is NameKind.APEX and qtype == NS:
            rendered = render(question, NOERROR, [zone.ns()], additional=zone.glue_rrsets())
        elif glue:
            rrsets = [r for r in zone.glue_rrsets() if r.rdtype == qtype]
            rendered = render(question, NOERROR, rrsets)
        else:
            rendered = render(question, NOERROR, authority=[zone.negative_soa(snapshot.serial)])
        self._store(self._by_table, key, rendered)
        return rendered

    def _routed(
        self,
        query: Query,
        source: str,
        snapshot: Snapshot,
        zone: ZoneData,
        model: str | None,
        outcome: Outcome,
    ) -> tuple[Rendered, int]:
        """Answer A, AAAA or TXT for a model name: the regions the table gives this client."""
        location, geo_scope, hash_len, prefix = self._locate(query, source, outcome)
        country, continent = location.country, location.continent
        where = (query.qname, query.qtype, country, continent)
        candidates, route = self._candidates_of(where, model, location, snapshot)
        multi = len(candidates.regions) > 1
        outcome.bucket = prefix_bucket(prefix, zone.seed) if multi else 0
        chosen = self.routed.choose(candidates, outcome.bucket)
        names = tuple(w.region for w in chosen)
        # A and AAAA naming regions depend on those regions and the zone only: kept across
        # tables. TXT names the table and the client's place; NODATA shows the SOA serial.
        key = (query.qname, query.qtype, names, multi) + (
            (country, continent) if query.qtype == TXT else ()
        )
        if query.qtype == TXT:
            cache, outcome.basis = self._by_table, self._table_basis
        elif names:
            cache, outcome.basis = self._cache, route
        else:
            cache = self._by_table
            outcome.basis = Route(
                route.valid_in, where, model, location, route.picks, snapshot.serial
            )
        rendered = cache.get(key)
        if rendered is None:
            outcome.marks.append("cache_misses")
            question = query.qname + struct.pack("!HH", query.qtype, query.qclass)
            rendered = self.routed.render(
                question, query.qtype, model, location, candidates, chosen, snapshot, zone
            )
            self._store(cache, key, rendered)
        else:
            outcome.marks.append("cache_hits")
        return rendered, (hash_len if multi else min(geo_scope, hash_len))

    def _candidates_of(
        self,
        where: tuple[bytes, int, str | None, str | None],
        model: str | None,
        location: ClientLocation,
        snapshot: Snapshot,
    ) -> tuple[Candidates, Route]:
        """Return a client place's candidates under ``snapshot`` and the basis of its replies."""
        found = self._candidates.get(where)
        if found is None:
            candidates = self.routed.candidates(
                where[1], model, location, snapshot, self.store.static, self.zone
            )
            picks = picks_of(candidates.regions)
            found = candidates, Route(self.replies.generation, where, model, location, picks)
            if len(self._candidates) >= self.config.cache_size:
                self._candidates.clear()
            self._candidates[where] = found
        return found

    def _store(
        self,
        cache: OrderedDict[tuple[object, ...], Rendered],
        key: tuple[object, ...],
        rendered: Rendered,
    ) -> None:
        if len(cache) >= self.config.cache_size:
            cache.popitem(last=False)  # oldest first, in constant time (see ``replies``)
        cache[key] = rendered

    def _locate(
        self, query: Query, source: str, outcome: Outcome
    ) -> tuple[ClientLocation, int, int, bytes]:
        """Return location, its ECS scope, the hashed prefix length and the tagged prefix."""
        ecs = query.ecs
        source_len: int | None = None
        if ecs is not None and ecs.source > 0:
            outcome.marks.append("ecs")
            family, packed, source_len = ecs.family, ecs.padded(), ecs.source
        else:
            outcome.uses_source = True
            family, packed = _pack(source)
        granularity = V4_GRANULARITY if family == 1 else V6_GRANULARITY
        hash_len = min(8 * len(packed) if source_len is None else source_len, granularity)
        prefix = bytes((family, hash_len)) + mask_prefix(packed, hash_len)
        # The engine's Locator lets the first address seen in a /24 (/56) stand for all of
        # it; this cache keys the same way, and saves the address parsing on the hot path.
        where = self._where.get(prefix)
        if where is None:
            where = self._lookup(family, packed, source_len)
            if len(self._where) >= LOCATION_CACHE:
                self._where.clear()
            self._where[prefix] = where
        return where[0], where[1], hash_len, prefix

    def _lookup(
        self, family: int, packed: bytes, prefix_len: int | None
    ) -> tuple[ClientLocation, int]:
        if self.locator is None or family == 0:
            return ClientLocation(), 0
        ip = socket.inet_ntop(socket.AF_INET if family == 1 else socket.AF_INET6, packed)
        return self.locator.locate_with_scope(ip, prefix_len)

    # --- writing messages ----------------------------------------------------------------

    def _finish(
        self, query: Query, rendered: Rendered, scope: int, tcp: bool, outcome: Outcome
    ) -> bytes:
        """Wrap cached sections in this query's header, question and OPT record."""
        rcode = rendered.rcode
        flags = FLAG_QR | (query.flags & (FLAG_RD | FLAG_CD)) | (rcode & 0xF)
        if rendered.aa:
            flags |= FLAG_AA
        arcount = rendered.arcount
        opt = b""
        if query.edns:
            ecs = query.ecs
            options = b"" if ecs is None else ecs.option(scope if ecs.source else 0)
            opt = opt_record(self._max_udp, rcode, query.dnssec_ok, options)
            arcount += 1
        if tcp:
            limit = MAX_TCP_MESSAGE
        elif query.edns:
            limit = min(max(query.payload, MIN_UDP_PAYLOAD), self._max_udp)
        else:
            limit = MIN_UDP_PAYLOAD
        size = HEADER.size + len(query.question) + len(rendered.sections) + len(opt)
        self._count(rcode, rendered.ancount, outcome)
        if size > limit:
            outcome.marks.append("truncated")
            header = HEADER.pack(query.id, flags | FLAG_TC, 1, 0, 0, 1 if opt else 0)
            return header + query.question + opt
        header = HEADER.pack(query.id, flags, 1, rendered.ancount, rendered.nscount, arcount)
        return header + query.question + rendered.sections + opt

    def _bare(self, query: Query, rcode: int, outcome: Outcome, truncated: bool = False) -> bytes:
        """Return a response with no records: an error, or a truncated (slipped) answer."""
        flags = FLAG_QR | (query.flags & (FLAG_RD | FLAG_CD)) | (rcode & 0xF)
        if truncated:
            flags |= FLAG_TC
        opt = b""
        if query.edns:
            options = b"" if query.ecs is None else query.ecs.option(0)
            opt = opt_record(self._max_udp, rcode, query.dnssec_ok, options)
        qdcount = 1 if query.question else 0
        self._count(rcode, 1, outcome)
        header = HEADER.pack(query.id, flags, qdcount, 0, 0, 1 if opt else 0)
        return header + query.question + opt

    @staticmethod
    def _count(rcode: int, ancount: int, outcome: Outcome) -> None:
        marks = outcome.marks
        marks.append("answered")
        outcome.rcode = RCODE_NAMES.get(rcode, "other")
        event = _EVENT_OF_RCODE.get(rcode)
        if event is not None:
            marks.append(event)
        elif rcode == NOERROR and ancount == 0:
            marks.append("nodata")


def _pack(address: str) -> tuple[int, bytes]:
    """Return the family (1 IPv4, 2 IPv6, 0 unknown) and packed form of a source address."""
    try:
        if ":" not in address:
            return 1, socket.inet_pton(socket.AF_INET, address)
        packed = socket.inet_pton(socket.AF_INET6, address.split("%", 1)[0])
    except OSError:
        return 0, b""
    if packed.startswith(_MAPPED):
        return 1, packed[12:]
    return 2, packed
