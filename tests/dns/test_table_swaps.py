"""A table swap keeps the caches warm, and every reply after it is what the new table says.

Each check compares a server that has answered before the swap (so answers from what it kept)
with a fresh server that was given the new table from the start and answers for the first time.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.dns.test_fleet_follow import moved
from tests.dns.world import (
    CN,
    GB,
    JP,
    NAME,
    SE,
    US,
    ZONE,
    addresses,
    ask,
    everywhere,
    make_table,
    query,
    quiet_config,
)
from trafficmgr.dns.server import DnsServer
from trafficmgr.routing.types import RoutingTable

Make = Callable[..., DnsServer]
SPLIT = [("eu-west", 0.5), ("eu-central", 0.5)]
PREFIXES = [f"10.{i // 256}.{i % 256}.0" for i in range(300)]


def at(table: RoutingTable, version: str, serial: float) -> RoutingTable:
    """Return ``table`` as another version generated at ``serial`` (its SOA serial)."""
    return replace(table, version=version, generated_at=serial)


SPREAD = [query(NAME, "A", ecs=(p, 24)).to_wire() for p in PREFIXES]


def spread(server: DnsServer) -> list[bytes | None]:
    """Ask for ``NAME`` from every test prefix (ECS /24) and return the replies."""
    return [server.handle(wire, "192.0.2.1") for wire in SPREAD]


def test_a_swap_that_routes_alike_keeps_every_cached_reply(make_server: Make) -> None:
    server = make_server(table=at(everywhere(SPLIT), "v1", 1_700_000_000))
    first = spread(server)
    misses = server.metrics["cache_misses"]
    assert server.set_table(at(everywhere(SPLIT), "v2", 1_700_000_001))
    fresh = make_server(table=at(everywhere(SPLIT), "v2", 1_700_000_001))
    after = spread(server)
    assert after == first == spread(fresh)  # the same bytes, and the new table's own
    metrics = server.metrics
    assert metrics["cache_misses"] == misses  # not one rendered again
    assert metrics["cache_carried"] == 1  # one check for the 300 prefixes of the place
    assert metrics["cache_changed"] == 0
    assert metrics["cache_hits"] >= len(PREFIXES)


def test_a_swap_that_moves_a_cached_answer_renders_it_from_the_new_table(make_server: Make) -> None:
    server = make_server(table=at(everywhere([("eu-west", 1.0)]), "v1", 1_700_000_000))
    wire = query(NAME, "A", ecs=(GB, 32)).to_wire()
    assert addresses(ask(server, wire)) == {"192.0.2.10"}
    assert addresses(ask(server, wire)) == {"192.0.2.10"}  # from the reply cache
    assert server.set_table(at(everywhere([("eu-central", 1.0)]), "v2", 1_700_000_000))
    assert addresses(ask(server, wire)) == {"192.0.2.20"}
    assert addresses(ask(server, wire)) == {"192.0.2.20"}  # and kept again
    assert server.metrics["cache_changed"] == 1
    assert server.metrics["reply_cache_entries"] == 1  # replaced in place


def test_a_weight_that_moves_moves_only_the_boundary_prefixes(make_server: Make) -> None:
    server = make_server(table=at(everywhere(SPLIT), "v1", 1_700_000_000))
    before = spread(server)
    shifted = [("eu-west", 0.6), ("eu-central", 0.4)]
    assert server.set_table(at(everywhere(shifted), "v2", 1_700_000_000))
    fresh = make_server(table=at(everywhere(shifted), "v2", 1_700_000_000))
    after, want = spread(server), spread(fresh)
    assert after == want
    kept = sum(a == b for a, b in zip(before, after, strict=True))
    assert 0.8 * len(PREFIXES) < kept < len(PREFIXES)  # about a tenth of them moved
    metrics = server.metrics
    assert metrics["cache_changed"] == 1
    assert metrics["cache_repicked"] == kept  # each kept one found so, the moved rendered
    assert spread(server) == want and server.metrics["cache_repicked"] == kept


def test_a_place_that_starts_splitting_gets_the_scope_of_a_split(make_server: Make) -> None:
    server = make_server(table=at(everywhere([("eu-west", 1.0)]), "v1", 1_700_000_000))
    wire = query(NAME, "A", ecs=("81.2.69.0", 24)).to_wire()
    ask(server, wire)
    split = [("eu-west", 0.99), ("us-east", 0.01)]  # bucket 0 still picks eu-west
    assert server.set_table(at(everywhere(split), "v2", 1_700_000_000))
    fresh = make_server(table=at(everywhere(split), "v2", 1_700_000_000))
    assert server.handle(wire, "192.0.2.1") == fresh.handle(wire, "192.0.2.1")
    assert server.metrics["cache_repicked"] == 0


def test_txt_and_the_soa_follow_every_version(make_server: Make) -> None:
    server = make_server(table=at(everywhere(SPLIT), "v1", 1_700_000_000))
    wires = [
        query(NAME, "TXT", ecs=(GB, 32)).to_wire(),
        query(ZONE, "SOA").to_wire(),
        query(f"nope.{ZONE}", "A").to_wire(),  # NXDOMAIN: its SOA names the serial
        query(NAME, "MX").to_wire(),  # NODATA, likewise
        query(ZONE, "NS").to_wire(),
    ]
    for n, serial in enumerate((1_700_000_000, 1_700_000_000, 1_700_000_007, 1_700_000_009)):
        table = at(everywhere(SPLIT), f"v{n + 2}", serial)
        assert server.set_table(table)
        fresh = make_server(table=table)
        for wire in wires:
            assert server.handle(wire, "192.0.2.1") == fresh.handle(wire, "192.0.2.1")
            assert server.handle(wire, "192.0.2.1") == fresh.handle(wire, "192.0.2.1")


def test_a_routed_nodata_follows_the_serial_though_its_list_stays(make_server: Make) -> None:
    closed = {z: {"llama-3-70b": []} for z in ("EU", "GB", "NA", "AS", "default")}
    server = make_server(table=at(make_table("v1", closed), "v1", 1_700_000_000))
    wire = query(NAME, "A", ecs=(GB, 32)).to_wire()
    assert ask(server, wire).authority and not ask(server, wire).answer  # NODATA, with the SOA
    table = at(make_table("v2", closed), "v2", 1_700_000_005)
    assert server.set_table(table)
    fresh = make_server(table=table)
    assert server.handle(wire, "192.0.2.1") == fresh.handle(wire, "192.0.2.1")


def _tables() -> list[dict[str, list[tuple[str, float]]]]:
    """Lists a table may give a zone: single regions, splits, nothing, unknown regions."""
    return [
        {"llama-3-70b": [("eu-west", 1.0)], "llama-3-8b": [("eu-west", 1.0)]},
        {"llama-3-70b": [("eu-central", 1.0)], "llama-3-8b": [("eu-west", 1.0)]},
        {"llama-3-70b": SPLIT, "llama-3-8b": [("us-east", 0.3), ("us-west", 0.7)]},
        {"llama-3-70b": [("eu-west", 0.7), ("eu-central", 0.3)], "llama-3-8b": SPLIT},
        {"llama-3-70b": [], "llama-3-8b": [("ap-southeast", 1.0)]},
        {"llama-3-70b": [("mars-1", 1.0)], "llama-3-8b": [("us-east", 1.0)]},
    ]


def _random_table(rng: random.Random, n: int) -> RoutingTable:
    lists = _tables()
    zones = {z: rng.choice(lists) for z in ("EU", "GB", "NA", "AS", "default")}
    table = make_table(f"r{n}", zones)
    return at(table, f"r{n}", 1_700_000_000 + n // 3)  # some swaps keep the serial


def _mix() -> list[tuple[bytes, str]]:
    """Queries of every kind, with ECS from each test place and without from several."""
    names = [NAME, f"llama-3-8b.{ZONE}", f"api.{ZONE}"]
    out: list[tuple[bytes, str]] = []
    for name in names:
        for rdtype in ("A", "AAAA", "TXT"):
            for place in (GB, SE, US, CN, JP, "198.18.0.1", *PREFIXES[:6]):
                source = 128 if ":" in place else 24
                out.append((query(name, rdtype, ecs=(place, source)).to_wire(), "192.0.2.1"))
            for source in ("81.2.69.142", "216.160.83.56", "10.0.0.1", "10.0.1.1"):
                out.append((query(name, rdtype).to_wire(), source))
    for name, rdtype in ((ZONE, "SOA"), (ZONE, "NS"), (f"ns1.{ZONE}", "A"), (NAME, "MX")):
        out.append((query(name, rdtype).to_wire(), "192.0.2.1"))
    out.append((query(f"gone.{ZONE}", "AAAA").to_wire(), "192.0.2.1"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cache_size", [50_000, 8])  # 8: replies and bases forgotten too
def test_after_any_swap_every_reply_is_the_new_tables(make_server: Make, cache_size: int) -> None:
    rng = random.Random(42)
    server = make_server(quiet_config(ns_addresses=("192.0.2.53",), cache_size=cache_size))
    mix = _mix()
    for n in range(40):
        table = _random_table(rng, n)
        assert server.set_table(table)
        fresh = make_server(quiet_config(ns_addresses=("192.0.2.53",)), table=table)
        order = mix[:]
        rng.shuffle(order)
        for wire, source in order:
            want = fresh.handle(wire, source)
            assert server.handle(wire, source) == want, (n, wire, source)
            assert server.handle(wire, source, tcp=True) == fresh.handle(wire, source, tcp=True)
        for wire, source in mix:
            assert server.handle(wire, source) == fresh.handle(wire, source)
        fresh.store.close()
    metrics = server.metrics
    assert metrics["cache_carried"] > 0 and metrics["cache_changed"] > 0  # both ways taken


@pytest.mark.slow
def test_swaps_keep_the_caches_bounded(make_server: Make) -> None:
    server = make_server(quiet_config(cache_size=64))
    for n in range(60):
        server.set_table(at(everywhere(SPLIT if n % 2 else [("eu-west", 1.0)]), f"m{n}", n))
        for i in range(100):
            server.handle(query(NAME, "A", ecs=(f"10.{n}.{i}.0", 24)).to_wire(), "192.0.2.1")
            server.handle(query(NAME, "TXT").to_wire(), f"10.{n}.{i}.1")
    responder = server.responder
    assert len(responder.replies.fixed) <= 64 and len(responder.replies.by_source) <= 64
    assert server.metrics["cache_entries"] <= 2 * 64
    assert len(responder._bases) <= 2 * 64


def test_the_garbage_collector_need_not_walk_the_reply_cache(make_server: Make) -> None:
    server = make_server(table=at(everywhere(SPLIT), "v1", 1_700_000_000))
    spread(server)
    server.set_table(at(everywhere([("eu-west", 0.6), ("eu-central", 0.4)]), "v2", 1))
    spread(server)  # some replies kept on the new route, some rendered again
    gc.collect()
    entries = list(server.responder.replies.fixed.values())
    assert len(entries) == len(PREFIXES)
    assert not any(gc.is_tracked(entry) for entry in entries)  # bytes and numbers only


@pytest.mark.slow
def test_replies_kept_across_swaps_keep_no_old_table_alive(make_server: Make) -> None:
    server = make_server(quiet_config(cache_size=10_000))
    gc.collect()
    before = sum(type(o) is RoutingTable for o in gc.get_objects())
    for n in range(40):  # each swap leaves replies that are never asked for again
        server.set_table(at(everywhere(SPLIT if n % 2 else [("eu-west", 1.0)]), f"m{n}", n))
        for i in range(20):
            server.handle(query(NAME, "A", ecs=(f"10.{n}.{i}.0", 24)).to_wire(), "192.0.2.1")
            server.handle(query(f"n{n}-{i}.{ZONE}", "A").to_wire(), "192.0.2.1")
    assert server.metrics["reply_cache_entries"] == 40 * 20 * 2  # all still kept
    gc.collect()
    after = sum(type(o) is RoutingTable for o in gc.get_objects())
    assert after - before <= 2  # the served table and the static one


def test_a_fleet_that_answers_alike_keeps_the_caches(make_server: Make) -> None:
    server = make_server(table=at(everywhere(SPLIT), "v1", 1_700_000_000))
    first = spread(server)
    misses = server.metrics["cache_misses"]
    fleet = server.fleet
    regions = (replace(fleet.regions[0], priority=fleet.regions[0].priority + 1),)
    server.set_fleet(replace(fleet, regions=regions + fleet.regions[1:]))
    assert spread(server) == first
    assert server.metrics["cache_misses"] == misses
    assert server.metrics["cache_resets"] == 0


def test_a_fleet_that_moves_an_address_empties_the_caches(make_server: Make) -> None:
    server = make_server(table=at(everywhere([("eu-west", 1.0)]), "v1", 1_700_000_000))
    wire = query(NAME, "A", ecs=(GB, 32)).to_wire()
    assert addresses(ask(server, wire)) == {"192.0.2.10"}
    server.set_fleet(moved(server.fleet, "eu-west", "192.0.2.99"))
    assert addresses(ask(server, wire)) == {"192.0.2.99"}
    assert server.metrics["cache_resets"] == 1
