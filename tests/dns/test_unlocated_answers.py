"""The shipped fleet denies clients that cannot be located: DNS answers them NODATA and says why
in TXT (it cannot refuse one client among a resolver's), and still answers located ones."""

from __future__ import annotations

from collections.abc import Callable

import dns.rcode

from tests.dns.world import EU_V4, GB, NAME, addresses, ask, query, txt
from trafficmgr.dns.server import DnsServer
from trafficmgr.routing.types import Fleet


def test_an_unlocated_resolver_gets_nodata_and_the_reason(
    make_server: Callable[..., DnsServer], denying_fleet: Fleet
) -> None:
    server = make_server(fleet_=denying_fleet)
    reply = ask(server, query(NAME, "A"), source="10.1.2.3")
    assert reply.rcode() == dns.rcode.NOERROR and not reply.answer
    why = txt(ask(server, query(NAME, "TXT"), source="10.1.2.3"))
    assert "client location unknown" in why and "unlocated_clients deny" in why
    located = ask(server, query(NAME, "A", ecs=(GB, 32)), source="10.1.2.3")
    assert addresses(located) and addresses(located) <= EU_V4
