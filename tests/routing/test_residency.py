"""Residency: strict rules are hard limits and intersect; preferred rules spill only when down."""

from __future__ import annotations

from dataclasses import replace

from trafficmgr.routing.geo import country_location
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.types import ClientLocation, Fleet, ResidencyMode, ResidencyRule


def rule(
    name: str,
    regions: tuple[str, ...],
    countries: str = "",
    continents: str = "",
    mode: ResidencyMode = ResidencyMode.STRICT,
) -> ResidencyRule:
    return ResidencyRule(
        name, frozenset(countries.split()), frozenset(continents.split()), regions, mode
    )


def test_strict_rule_limits_its_clients(fleet: Fleet) -> None:
    decision = allowed_regions(fleet, country_location("IN"))
    assert decision.regions == ("ap-south",)
    assert decision.strict and decision.rules == ("india-local",)
    assert "india-local" in decision.reason


def test_clients_no_rule_matches_are_unrestricted(fleet: Fleet) -> None:
    decision = allowed_regions(fleet, country_location("US"))
    assert decision.regions is None and not decision.strict and decision.rules == ()
    assert decision.allows("us-east")


def test_unknown_location_matches_no_rule(gdpr_fleet: Fleet) -> None:
    assert allowed_regions(gdpr_fleet, ClientLocation()).regions is None


def test_continent_rule_matches_by_country_or_continent(gdpr_fleet: Fleet) -> None:
    by_country = allowed_regions(gdpr_fleet, ClientLocation(country="FR"))
    by_continent = allowed_regions(gdpr_fleet, ClientLocation(continent="EU"))
    assert by_country.regions == by_continent.regions == ("eu-west", "eu-central")


def test_several_strict_rules_intersect(gdpr_fleet: Fleet) -> None:
    de_only = rule("de-only", ("eu-central",), countries="DE")
    fleet = replace(gdpr_fleet, residency=(*gdpr_fleet.residency, de_only))
    decision = allowed_regions(fleet, country_location("DE"))
    assert decision.regions == ("eu-central",)
    assert set(decision.rules) == {"gdpr", "de-only"}
    assert allowed_regions(fleet, country_location("FR")).regions == ("eu-west", "eu-central")


def test_disjoint_strict_rules_allow_nothing(gdpr_fleet: Fleet) -> None:
    elsewhere = rule("de-in-india", ("ap-south",), countries="DE")
    fleet = replace(gdpr_fleet, residency=(*gdpr_fleet.residency, elsewhere))
    decision = allowed_regions(fleet, country_location("DE"))
    assert decision.regions == ()
    assert not decision.allows("eu-west") and not decision.allows("ap-south")
    assert "nothing" in decision.reason


def test_preferred_rule_narrows_while_a_preferred_region_is_up(fleet: Fleet) -> None:
    jp = rule("jp-pref", ("ap-south",), countries="JP", mode=ResidencyMode.PREFERRED)
    fleet = replace(fleet, residency=(*fleet.residency, jp))
    decision = allowed_regions(fleet, country_location("JP"))
    assert decision.regions == ("ap-south",) and decision.preferred == ("ap-south",)
    assert not decision.strict and not decision.spilled


def test_preferred_rule_spills_only_when_all_preferred_regions_are_down(fleet: Fleet) -> None:
    jp = rule("jp-pref", ("ap-south", "eu-west"), countries="JP", mode=ResidencyMode.PREFERRED)
    fleet = replace(fleet, residency=(*fleet.residency, jp))
    one_down = allowed_regions(fleet, country_location("JP"), down={"ap-south"})
    assert not one_down.spilled and one_down.regions == ("eu-west", "ap-south")
    all_down = allowed_regions(fleet, country_location("JP"), down={"ap-south", "eu-west"})
    assert all_down.spilled and all_down.regions is None
    assert "all preferred regions down" in all_down.reason


def test_preferred_inside_strict_spills_to_the_strict_set_only(gdpr_fleet: Fleet) -> None:
    de = rule("de-pref", ("eu-central",), countries="DE", mode=ResidencyMode.PREFERRED)
    fleet = replace(gdpr_fleet, residency=(*gdpr_fleet.residency, de))
    decision = allowed_regions(fleet, country_location("DE"))
    assert decision.regions == ("eu-central",) and decision.strict
    spilled = allowed_regions(fleet, country_location("DE"), down={"eu-central"})
    assert spilled.spilled and spilled.regions == ("eu-west", "eu-central")


def test_preferred_regions_outside_the_strict_set_are_ignored(gdpr_fleet: Fleet) -> None:
    de = rule("de-pref", ("ap-south",), countries="DE", mode=ResidencyMode.PREFERRED)
    fleet = replace(gdpr_fleet, residency=(*gdpr_fleet.residency, de))
    decision = allowed_regions(fleet, country_location("DE"))
    assert decision.regions == ("eu-west", "eu-central") and decision.preferred == ()
    assert "ignored" in decision.reason
