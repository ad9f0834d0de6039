"""Message size: answers that do not fit the client's buffer go out with TC=1, whole over TCP."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import dns.flags
import dns.rcode
import pytest

from tests.dns.world import GB, NAME, addresses, ask, query
from trafficmgr.dns.server import DnsServer
from trafficmgr.routing.types import Fleet


def fleet_with_many_addresses(fleet: Fleet, count: int) -> Fleet:
    """The EU regions with ``count`` IPv6 ingress addresses each (28 octets each in an answer).

    Both: the GB client is answered by either, by the weights of its prefix.
    """
    prefixes = {"eu-west": "2001:db8:10", "eu-central": "2001:db8:20"}
    regions = tuple(
        replace(
            r,
            addresses=(
                r.addresses[0],
                *(f"{prefixes[r.name]}::{i:x}" for i in range(1, count + 1)),
            ),
        )
        if r.name in prefixes
        else r
        for r in fleet.regions
    )
    return replace(fleet, regions=regions)


@pytest.fixture
def big(make_server: Callable[..., DnsServer], fleet: Fleet) -> DnsServer:
    return make_server(fleet_=fleet_with_many_addresses(fleet, 30))  # ~900 octets of AAAA


def test_without_edns_an_answer_over_512_is_truncated(big: DnsServer) -> None:
    reply = ask(big, query(NAME, "AAAA"), source=GB)
    assert reply.flags & dns.flags.TC and not reply.answer
    assert reply.rcode() == dns.rcode.NOERROR and reply.question
    assert big.metrics["truncated"] == 1


def test_with_a_large_edns_buffer_it_fits(big: DnsServer) -> None:
    reply = ask(big, query(NAME, "AAAA", edns=0, payload=1232), source=GB)
    assert not reply.flags & dns.flags.TC and len(addresses(reply)) == 30


def test_a_small_edns_buffer_truncates_and_keeps_the_opt(big: DnsServer) -> None:
    reply = ask(big, query(NAME, "AAAA", ecs=(GB, 32), payload=600))
    assert reply.flags & dns.flags.TC and not reply.answer
    assert reply.edns == 0 and reply.options  # OPT and ECS survive truncation


def test_over_tcp_the_whole_answer_comes(big: DnsServer) -> None:
    reply = ask(big, query(NAME, "AAAA"), source=GB, tcp=True)
    assert not reply.flags & dns.flags.TC and len(addresses(reply)) == 30


def test_the_server_cap_applies_even_to_a_larger_client_buffer(
    make_server: Callable[..., DnsServer], fleet: Fleet
) -> None:
    huge = make_server(fleet_=fleet_with_many_addresses(fleet, 60))  # ~1,700 octets
    reply = ask(huge, query(NAME, "AAAA", edns=0, payload=4096), source=GB)
    assert reply.flags & dns.flags.TC
    assert len(addresses(ask(huge, query(NAME, "AAAA"), source=GB, tcp=True))) == 60
