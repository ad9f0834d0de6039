"""The reply cache of the UDP path: byte for byte what rendering gives, per table version.

Each check compares a server that has answered a query before (so answers it from the reply
cache) with a fresh server answering it for the first time (the slow way).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import dns.rcode
import pytest

from tests.dns.world import (
    EU_V4,
    GB,
    NAME,
    US,
    ZONE,
    addresses,
    ask,
    ecs_of,
    everywhere,
    query,
    quiet_config,
    rcode_of,
)
from trafficmgr.dns.ratelimit import RateLimiter
from trafficmgr.dns.replies import ReplyCache
from trafficmgr.dns.server import DnsServer

Make = Callable[..., DnsServer]
SPLIT = [("eu-west", 0.5), ("eu-central", 0.5)]


def with_id(wire: bytes, qid: int) -> bytes:
    return struct.pack("!H", qid) + wire[2:]


def test_a_repeated_query_gets_the_rendered_reply_with_its_own_id(make_server: Make) -> None:
    cached, fresh = make_server(), make_server()
    wire = query(NAME, "A", ecs=(GB, 32)).to_wire()
    first = cached.handle(with_id(wire, 1), "192.0.2.1")
    again = cached.handle(with_id(wire, 0xBEEF), "192.0.2.1")
    rendered = fresh.handle(with_id(wire, 0xBEEF), "192.0.2.1")
    assert first is not None and again is not None
    assert again == rendered  # the same bytes, the ID patched in
    assert first[2:] == again[2:] and again[:2] == b"\xbe\xef"
    assert cached.metrics["reply_cache_entries"] == 1


def test_the_cache_follows_the_table_version(make_server: Make) -> None:
    server = make_server(table=everywhere([("eu-west", 1.0)], version="v1"))
    wire = query(NAME, "A", ecs=(GB, 32)).to_wire()
    assert addresses(ask(server, wire)) == {"192.0.2.10"}
    assert addresses(ask(server, wire)) == {"192.0.2.10"}  # from the cache
    assert server.set_table(everywhere([("eu-central", 1.0)], version="v2"))
    assert addresses(ask(server, wire)) == {"192.0.2.20"}
    assert server.responder.replies.snapshot is server.store.snapshot
    assert server.metrics["reply_cache_entries"] == 1  # v1's reply is gone


def test_the_cache_follows_a_new_fleet(make_server: Make) -> None:
    server = make_server()
    wire = query(NAME, "A").to_wire()
    ask(server, wire)
    server.set_fleet(server.zone.fleet)
    ask(server, wire)
    assert server.responder.replies.zone is server.zone


def test_each_ecs_query_gets_its_own_address_and_the_scope_rendered(make_server: Make) -> None:
    cached, fresh = make_server(), make_server()
    for address, source in ((GB, 32), ("81.2.69.0", 24), (GB, 32), ("81.2.69.0", 24)):
        wire = query(NAME, "A", ecs=(address, source)).to_wire()
        got = ecs_of(ask(cached, wire))
        want = ecs_of(ask(fresh, wire))
        assert got is not None and want is not None
        assert (got.address, got.srclen, got.scopelen) == (address, source, want.scopelen)
    assert cached.metrics["reply_cache_entries"] == 2


@pytest.mark.slow
def test_weighted_answers_stay_weighted_and_stable_per_prefix(make_server: Make) -> None:
    table = everywhere(SPLIT, version="split")
    cached, fresh = make_server(table=table), make_server(table=table)
    prefixes = [f"10.{i // 256}.{i % 256}.0" for i in range(2000)]
    first = {p: addresses(ask(cached, query(NAME, "A", ecs=(p, 24)))) for p in prefixes}
    again = {p: addresses(ask(cached, query(NAME, "A", ecs=(p, 24)))) for p in prefixes}
    assert first == again  # a resolver keeps its answer while the table stays
    west = sum(1 for a in again.values() if a == {"192.0.2.10"})
    assert 0.45 < west / len(prefixes) < 0.55  # and the population splits by weight
    for p in prefixes[:200]:
        assert again[p] == addresses(ask(fresh, query(NAME, "A", ecs=(p, 24))))
    ecs = ecs_of(ask(cached, query(NAME, "A", ecs=(prefixes[0], 24))))
    assert ecs is not None and ecs.scopelen == 24  # picked per /24: the scope says so


def test_without_ecs_the_answer_is_cached_per_source_prefix(make_server: Make) -> None:
    table = everywhere(SPLIT, version="split")
    cached, fresh = make_server(table=table), make_server(table=table)
    wire = query(NAME, "A").to_wire()
    sources = [f"10.{i}.{j}.7" for i in range(8) for j in range(16)]
    for source in sources * 2:
        assert cached.handle(wire, source) == fresh.handle(wire, source), source
    answers = {frozenset(addresses(ask(fresh, wire, source=s))) for s in sources}
    assert len(answers) == 2  # both regions are in use: the source prefix did matter
    assert cached.metrics["reply_cache_entries"] == len({s.rsplit(".", 1)[0] for s in sources})
    assert cached.handle(wire, "10.0.0.200") == cached.handle(wire, "10.0.0.7")  # same /24


def test_ipv6_sources_share_a_reply_per_56(make_server: Make) -> None:
    server = make_server(table=everywhere(SPLIT, version="split"))
    wire = query(NAME, "A").to_wire()
    server.handle(wire, "2001:db8:0:ff::1")
    server.handle(wire, "2001:db8:0:1::2")  # the same /56
    server.handle(wire, "2001:db8:0:100::1")  # another one
    assert server.metrics["reply_cache_entries"] == 2


def test_hits_are_counted_like_rendered_answers(make_server: Make) -> None:
    cached, fresh = make_server(), make_server()
    wires = [
        query(NAME, "A", ecs=(GB, 32)).to_wire(),
        query(NAME, "AAAA").to_wire(),
        query(f"nope.{ZONE}", "A").to_wire(),
        query("example.com", "A").to_wire(),
        query(NAME, "TXT", ecs=(US, 24), payload=512).to_wire(),
    ]
    for _ in range(5):
        for wire in wires:
            cached.handle(wire, "192.0.2.1")
    for wire in wires:
        fresh.handle(wire, "192.0.2.1")
    got, one = cached.metrics, fresh.metrics
    for key in ("queries", "udp", "answered", "ecs", "nxdomain", "refused", "truncated"):
        assert got[key] == 5 * one[key], key
    assert got["rcode"] == {k: 5 * v for k, v in one["rcode"].items()}  # type: ignore[union-attr]
    assert got["qtype"] == {k: 5 * v for k, v in one["qtype"].items()}  # type: ignore[union-attr]
    assert got["cache_hits"] >= 4 * len(wires)


def test_bad_input_is_refused_or_dropped_every_time(make_server: Make) -> None:
    server = make_server()
    formerr = struct.pack("!HHHHHH", 7, 0x0100, 2, 0, 0, 0) + b"\x00\x00\x01\x00\x01"
    response = struct.pack("!HHHHHH", 8, 0x8100, 1, 0, 0, 0) + b"\x00\x00\x01\x00\x01"
    for _ in range(3):
        reply = server.handle(formerr, "192.0.2.1")
        assert reply is not None and rcode_of(reply) == dns.rcode.FORMERR
        assert server.handle(response, "192.0.2.1") is None
        assert server.handle(b"\x00", "192.0.2.1") is None
        refused = server.handle(query("example.com", "A").to_wire(), "192.0.2.1")
        assert refused is not None and rcode_of(refused) == dns.rcode.REFUSED
    metrics = server.metrics
    assert metrics["formerr"] == 3 and metrics["dropped"] == 6 and metrics["refused"] == 3
    assert metrics["reply_cache_entries"] == 1  # only the ordinary (REFUSED) answer is kept


def test_the_rate_limiter_still_sees_every_cached_query(make_server: Make) -> None:
    server = make_server(quiet_config(rrl_rate=10, rrl_burst=10, rrl_slip=0))
    server.responder.limiter = RateLimiter(10, 10, 0, clock=lambda: 1000.0)
    wire = query(NAME, "A", ecs=(GB, 32)).to_wire()
    replies = [server.handle(wire, "203.0.113.66") for _ in range(50)]
    assert sum(r is not None for r in replies) == 10
    assert server.metrics["rrl_dropped"] == 40
    assert addresses(ask(server, wire, source="198.51.100.5")) <= EU_V4  # a bystander


def test_the_reply_cache_stays_bounded(make_server: Make) -> None:
    server = make_server(quiet_config(cache_size=50))
    for i in range(250):
        ask(server, query(NAME, "A", ecs=(f"10.0.{i}.0", 24)))
        ask(server, query(NAME, "A"), source=f"10.1.{i}.1")
    assert server.metrics["reply_cache_entries"] <= 100  # 50 of each kind at most
    assert addresses(ask(server, query(NAME, "A", ecs=(GB, 32)))) <= EU_V4


def test_a_full_cache_forgets_its_oldest_reply_first() -> None:
    cache = ReplyCache(limit=3)
    basis = 7  # the id of the replies' basis
    for n in range(4):
        cache.put(b"query %d" % n, None, (b"reply %d" % n, 0, basis, 0, b"E"))
    cache.put(b"query 9", "192.0.2", (b"by source", 0, basis, 0, b"E"))  # it has its own bound
    assert len(cache) == 4
    assert cache.get(b"query 0", "192.0.2.1") is None
    assert cache.get(b"query 1", "192.0.2.1") == (b"reply 1", 0, basis, 0, b"E")
    assert cache.get(b"query 9", "192.0.2.77") == (b"by source", 0, basis, 0, b"E")
    cache.put(b"query 1", None, (b"again", 0, basis, 0, b"E"))  # a key already kept evicts nothing
    assert cache.get(b"query 2", "192.0.2.1") == (b"reply 2", 0, basis, 0, b"E")
