"""Clients that cannot be located get what the fleet's ``unlocated`` setting says, everywhere.

A private address, no GeoIP answer, no ECS: the client matches no residency rule. By default
that is no restriction (as before the setting existed); ``deny`` refuses it, ``rule:NAME``
holds it to that rule's regions strictly, ``zone:CODE`` routes it as a client of that zone.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from trafficmgr.routing.decision import region_candidates
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.table import static_table
from trafficmgr.routing.types import (
    ClientLocation,
    Fleet,
    Request,
    ResidencyMode,
    UnlocatedClients,
    UnlocatedKind,
)

UNKNOWN = ClientLocation()


def unlocated(fleet: Fleet, text: str) -> Fleet:
    return replace(fleet, unlocated=UnlocatedClients.parse(text))


def candidates(fleet: Fleet, client: ClientLocation) -> list[str]:
    table = static_table(fleet, 0.0)
    found = region_candidates(fleet, table, Request("llama-3-70b", client, 100, 10), "10.0.0.7")
    return [w.region for w in found.regions]


def test_by_default_an_unlocated_client_is_unrestricted(gdpr_fleet: Fleet) -> None:
    decision = allowed_regions(gdpr_fleet, UNKNOWN)
    assert decision.regions is None and not decision.denied
    assert set(candidates(gdpr_fleet, UNKNOWN)) == {"eu-west", "eu-central", "ap-south"}


def test_deny_refuses_an_unlocated_client(gdpr_fleet: Fleet) -> None:
    fleet = unlocated(gdpr_fleet, "deny")
    decision = allowed_regions(fleet, UNKNOWN)
    assert decision.denied and decision.regions == () and decision.strict
    assert "client location unknown" in decision.reason
    found = region_candidates(
        fleet, static_table(fleet, 0.0), Request("llama-3-70b", UNKNOWN, 1, 1), None
    )
    assert found.denied and found.regions == () and "deny" in found.note
    # DNS answers from the table: the default zone's list is empty (NODATA), with the why
    table = static_table(fleet, 0.0)
    assert table.zones["default"]["llama-3-70b"] == ()
    assert "unlocated_clients deny" in table.notes["default"]["llama-3-70b"]


def test_deny_leaves_located_clients_alone(gdpr_fleet: Fleet) -> None:
    fleet = unlocated(gdpr_fleet, "deny")
    assert not allowed_regions(fleet, country_location("US")).denied
    assert allowed_regions(fleet, country_location("FR")).regions == ("eu-west", "eu-central")
    assert candidates(fleet, country_location("US"))


def test_rule_holds_an_unlocated_client_to_its_regions_strictly(gdpr_fleet: Fleet) -> None:
    fleet = unlocated(gdpr_fleet, "rule:india-local")
    decision = allowed_regions(fleet, UNKNOWN)
    assert decision.regions == decision.strict_regions == ("ap-south",)
    assert decision.strict and not decision.denied
    assert candidates(fleet, UNKNOWN) == ["ap-south"]


def test_rule_of_preferred_mode_is_still_strict_for_unlocated_clients(gdpr_fleet: Fleet) -> None:
    soft = replace(gdpr_fleet.residency[-1], mode=ResidencyMode.PREFERRED)
    rules = (*gdpr_fleet.residency[:-1], soft)
    fleet = unlocated(replace(gdpr_fleet, residency=rules), "rule:gdpr")
    assert allowed_regions(fleet, UNKNOWN).strict_regions == ("eu-west", "eu-central")


def test_rule_missing_from_the_fleet_denies(gdpr_fleet: Fleet) -> None:
    fleet = unlocated(gdpr_fleet, "rule:gone")
    decision = allowed_regions(fleet, UNKNOWN)
    assert decision.denied and "no such rule" in decision.reason


def test_zone_routes_an_unlocated_client_as_that_zone(gdpr_fleet: Fleet) -> None:
    fleet = unlocated(gdpr_fleet, "zone:EU")
    decision = allowed_regions(fleet, UNKNOWN)
    assert decision.regions == ("eu-west", "eu-central") and decision.strict
    assert "zone:EU" in decision.reason
    assert set(candidates(fleet, UNKNOWN)) <= {"eu-west", "eu-central"}
    in_india = unlocated(gdpr_fleet, "zone:IN")
    assert candidates(in_india, UNKNOWN) == ["ap-south"]


def test_a_country_without_a_continent_is_unlocated(gdpr_fleet: Fleet) -> None:
    fleet = unlocated(gdpr_fleet, "deny")
    assert allowed_regions(fleet, ClientLocation(country="ZZ")).denied


@pytest.mark.parametrize(
    ("text", "kind", "target"),
    [
        ("unrestricted", UnlocatedKind.UNRESTRICTED, ""),
        ("deny", UnlocatedKind.DENY, ""),
        ("rule:gdpr", UnlocatedKind.RULE, "gdpr"),
        ("zone:eu", UnlocatedKind.ZONE, "EU"),
        ("zone:DE", UnlocatedKind.ZONE, "DE"),
    ],
)
def test_parse_reads_every_form(text: str, kind: UnlocatedKind, target: str) -> None:
    setting = UnlocatedClients.parse(text)
    assert (setting.kind, setting.target) == (kind, target)
    assert UnlocatedClients.parse(str(setting)) == setting


@pytest.mark.parametrize("text", ["", "allow", "rule:", "zone:XX", "zone:", 3, "deny:x"])
def test_parse_refuses_anything_else(text: object) -> None:
    with pytest.raises(ValueError):
        UnlocatedClients.parse(text)
