"""Knot DNS: RFC 2136 with TSIG, diffed via AXFR, or via the last published state when the
ACL refuses the transfer; and a table compiled by the engine from the example fleet."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.dns_publish.conftest import Knot
from tests.dns_publish.servers import soa_serial
from tests.dns_publish.world import EU_WEST_V4, US_EAST_V4, ask, fqdn, make_zone, table_v1, table_v2
from trafficmgr.dns.publishers import DnsZone, Rfc2136Target
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.routing.table import lookup, static_table
from trafficmgr.routing.types import ClientLocation, UnlocatedClients

pytestmark = pytest.mark.integration

EXAMPLE_FLEET = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"


def test_publish_then_only_the_difference(knot: Knot) -> None:
    target = Rfc2136Target(make_zone(), "127.0.0.1", knot.key, port=knot.port)

    first = target.publish(table_v1())
    assert (first.source, first.created, first.update_ops, first.messages) == ("axfr", 8, 8, 1)
    assert ask(knot.port, fqdn("llama-3-70b"), "A") == {US_EAST_V4}
    serial = soa_serial(knot.port)

    second = target.publish(table_v2())
    assert (second.created, second.updated, second.deleted, second.update_ops) == (0, 4, 0, 8)
    assert ask(knot.port, fqdn("llama-3-70b"), "A") == {EU_WEST_V4}
    assert soa_serial(knot.port) == (serial or 0) + 1


def test_refused_transfer_falls_back_to_the_last_published_state(
    knot_no_axfr: Knot, tmp_path: Path
) -> None:
    state = tmp_path / "state" / "knot.json"
    target = Rfc2136Target(
        make_zone(), "127.0.0.1", knot_no_axfr.key, port=knot_no_axfr.port, state_file=state
    )

    first = target.publish(table_v1())  # nothing known: every set is replaced (delete + add)
    assert (first.source, first.created, first.update_ops) == ("none", 8, 16)
    assert target.metrics.get("axfr_refused") == 1

    restarted = Rfc2136Target(
        make_zone(), "127.0.0.1", knot_no_axfr.key, port=knot_no_axfr.port, state_file=state
    )
    second = restarted.publish(table_v2())  # diffed against the state file
    assert (second.source, second.updated, second.update_ops) == ("state", 4, 8)
    assert ask(knot_no_axfr.port, fqdn("llama-3-70b"), "A") == {EU_WEST_V4}


def test_a_table_compiled_from_the_example_fleet(knot: Knot) -> None:
    # A server without views answers every resolver as a client that cannot be located, which
    # the shipped fleet denies (the next test); a fleet published this way says where such
    # clients go, here anywhere.
    shipped = load_fleet_file(str(EXAMPLE_FLEET))
    fleet = replace(shipped, unlocated=UnlocatedClients.parse("unrestricted"))
    table = static_table(fleet, now=1_800_000_000.0)
    zone = DnsZone.from_fleet(fleet)
    target = Rfc2136Target(zone, "127.0.0.1", knot.key, port=knot.port)

    result = target.publish(table)

    assert result.created > 0
    top = max(lookup(table, ClientLocation(), "llama-3-70b"), key=lambda w: w.weight)
    expected = {a for a in fleet.region(top.region).addresses if ":" not in a}
    assert ask(knot.port, fqdn("llama-3-70b"), "A") == expected
    (txt,) = ask(knot.port, fqdn("llama-3-70b"), "TXT")
    assert f"table={table.version}" in txt and f"region={top.region}" in txt


def test_the_shipped_fleet_publishes_no_address_for_clients_it_cannot_locate(knot: Knot) -> None:
    fleet = load_fleet_file(str(EXAMPLE_FLEET))
    assert str(fleet.unlocated) == "deny"
    table = static_table(fleet, now=1_800_000_000.0)
    target = Rfc2136Target(DnsZone.from_fleet(fleet), "127.0.0.1", knot.key, port=knot.port)

    target.publish(table)

    assert lookup(table, ClientLocation(), "llama-3-70b") == ()
    assert ask(knot.port, fqdn("llama-3-70b"), "A") == set()
