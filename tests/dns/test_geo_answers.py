"""Routed answers: where a client is (ECS or source), which regions it gets, the scope."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import dns.rcode

from tests.dns.world import (
    AP_V4,
    CN,
    EU_V4,
    EU_V6,
    GB,
    JP,
    NAME,
    SE,
    US,
    US_V4,
    ZONE,
    addresses,
    ask,
    ecs_of,
    everywhere,
    make_table,
    query,
    quiet_config,
    txt,
)
from trafficmgr.dns.server import DnsServer


def test_ecs_places_the_client_gb_gets_eu_regions_only(server: DnsServer) -> None:
    for client in (GB, SE):
        for rdtype, allowed in (("A", EU_V4), ("AAAA", EU_V6)):
            reply = ask(server, query(NAME, rdtype, ecs=(client, 32)), source="127.0.0.1")
            assert reply.rcode() == dns.rcode.NOERROR
            assert addresses(reply) and addresses(reply) <= allowed, (client, rdtype)


def test_source_address_places_the_client_without_ecs(server: DnsServer) -> None:
    assert addresses(ask(server, query(NAME, "A"), source=US)) <= US_V4
    assert addresses(ask(server, query(NAME, "A"), source=GB)) <= EU_V4
    assert addresses(ask(server, query(NAME, "A"), source=CN)) <= AP_V4
    reply = ask(server, query(NAME, "A", edns=0), source=GB)
    assert ecs_of(reply) is None  # no ECS asked, none answered


def test_ecs_wins_over_the_source_address(server: DnsServer) -> None:
    reply = ask(server, query(NAME, "A", ecs=(US, 24)), source=GB)
    assert addresses(reply) <= US_V4


def test_ipv6_client_in_japan_goes_to_asia(server: DnsServer) -> None:
    assert addresses(ask(server, query(NAME, "A", ecs=(JP, 48)))) <= AP_V4
    assert addresses(ask(server, query(NAME, "A"), source=JP)) <= AP_V4


def test_scope_is_the_prefix_the_answer_depends_on(server: DnsServer) -> None:
    single = ecs_of(ask(server, query(NAME, "A", ecs=(GB, 32))))
    assert single is not None and single.srclen == 32 and single.scopelen == 24
    shorter = ecs_of(ask(server, query(NAME, "A", ecs=("81.2.0.0", 16))))
    assert shorter is not None and shorter.scopelen <= 16
    v6 = ecs_of(ask(server, query(NAME, "AAAA", ecs=(JP, 64))))
    assert v6 is not None and 0 < v6.scopelen <= 56
    private = ecs_of(ask(server, query(NAME, "A", ecs=("0.0.0.0", 0))))
    assert private is not None and private.scopelen == 0  # /0: the client asked for no geo


def test_weighted_choice_is_stable_per_prefix_and_spread_over_prefixes(
    make_server: Callable[..., DnsServer],
) -> None:
    server = make_server(table=everywhere([("us-east", 0.75), ("eu-west", 0.25)]))
    first = addresses(ask(server, query(NAME, "A", ecs=("198.18.7.0", 24))))
    for _ in range(5):
        assert addresses(ask(server, query(NAME, "A", ecs=("198.18.7.0", 24)))) == first
    picks: Counter[str] = Counter()
    for i in range(400):
        reply = ask(server, query(NAME, "A", ecs=(f"10.{i // 256}.{i % 256}.0", 24)))
        (address,) = addresses(reply)
        picks[address] += 1
        assert ecs_of(reply).scopelen == 24  # type: ignore[union-attr]
    assert 0.65 < picks["198.51.100.10"] / 400 < 0.85
    assert picks["192.0.2.10"] + picks["198.51.100.10"] == 400


def test_several_regions_per_answer_when_configured(
    make_server: Callable[..., DnsServer],
) -> None:
    table = everywhere([("us-east", 0.5), ("eu-west", 0.3), ("ap-southeast", 0.2)])
    server = make_server(quiet_config(answers=2), table=table)
    reply = ask(server, query(NAME, "A", ecs=("10.0.0.0", 24)))
    assert len(addresses(reply)) == 2
    assert len(txt(ask(server, query(NAME, "TXT", ecs=("10.0.0.0", 24)))).splitlines()) == 3


def test_txt_explains_region_reason_and_table_version(server: DnsServer) -> None:
    text = txt(ask(server, query(NAME, "TXT", ecs=(SE, 32))))
    version = server.store.snapshot.version
    assert f"table={version}" in text and "source=static" in text
    assert "client=SE/EU" in text and "region=eu-" in text
    assert "reason=" in text and "gdpr" in text  # the residency rule is part of the reason


def test_a_european_client_outside_the_eea_is_not_bound_by_gdpr(server: DnsServer) -> None:
    text = txt(ask(server, query(NAME, "TXT", ecs=(GB, 32))))
    assert "client=GB/EU" in text and "region=eu-" in text  # the nearest regions, by choice
    assert "gdpr" not in text


def test_api_name_answers_for_any_model(server: DnsServer) -> None:
    reply = ask(server, query(f"api.{ZONE}", "A", ecs=(GB, 32)))
    assert addresses(reply) and addresses(reply) <= EU_V4
    assert "model=any" in txt(ask(server, query(f"api.{ZONE}", "TXT", ecs=(GB, 32))))


def test_unknown_location_gets_the_default_zone(make_server: Callable[..., DnsServer]) -> None:
    table = make_table("t-default", {"default": {"llama-3-70b": [("us-west", 1.0)]}})
    server = make_server(table=table)
    reply = ask(server, query(NAME, "A"), source="127.0.0.1")
    assert addresses(reply) == {"198.51.100.20"}
    assert "client=-/-" in txt(ask(server, query(NAME, "TXT"), source="127.0.0.1"))


def test_server_without_geoip_answers_everyone_from_the_default_zone(fleet: object) -> None:
    server = DnsServer(fleet, quiet_config(), geoip=False)  # type: ignore[arg-type]
    reply = ask(server, query(NAME, "A", ecs=(GB, 32)))
    assert reply.rcode() == dns.rcode.NOERROR and addresses(reply)
    # no location, but the default zone's weighted choice still depends on the /24
    assert ecs_of(reply).scopelen == 24  # type: ignore[union-attr]
    assert "client=-/-" in txt(ask(server, query(NAME, "TXT", ecs=(GB, 32))))


def test_a_small_weight_change_moves_only_a_few_prefixes(
    make_server: Callable[..., DnsServer],
) -> None:
    server = make_server(table=everywhere([("us-east", 0.5), ("eu-west", 0.5)], version="v1"))
    prefixes = [f"10.{i // 256}.{i % 256}.0" for i in range(400)]

    def answers() -> list[set[str]]:
        return [addresses(ask(server, query(NAME, "A", ecs=(p, 24)))) for p in prefixes]

    before = answers()
    server.set_table(everywhere([("us-east", 0.55), ("eu-west", 0.45)], version="v2"))
    after = answers()
    moved = sum(a != b for a, b in zip(before, after, strict=True))
    assert 0 < moved <= 0.1 * len(prefixes)  # ~5 % at the boundary, not a reshuffle
