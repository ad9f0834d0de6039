"""Residency by named country sets: GDPR binds the EEA, not continent EU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.worlds import EEA_SETS
from trafficmgr.fleetfile import FleetError, dump_fleet, load_fleet_text
from trafficmgr.routing.countries import CONTINENT_OF, continent_of
from trafficmgr.routing.countrysets import (
    COUNTRY_SETS,
    UnknownCountrySet,
    covered_countries,
    set_countries,
)
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.table import compile_table, lookup, stranded_zones, table_zones
from trafficmgr.routing.types import AllDown, Fleet, RegionState, ResidencyRule

# fmt: off
EU_MEMBER_STATES = {
    "AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU",
    "IE", "IT", "LT", "LU", "LV", "MT", "NL", "PL", "PT", "RO", "SE", "SI", "SK",
}
# fmt: on


def test_every_member_is_an_iso_code_the_engine_places() -> None:
    for name, members in COUNTRY_SETS.items():
        assert members, name
        assert all(continent_of(c) is not None for c in members), name


def test_the_sets_have_their_documented_members() -> None:
    eu = COUNTRY_SETS["EU27"]
    assert eu >= EU_MEMBER_STATES and len(EU_MEMBER_STATES) == 27
    assert eu - EU_MEMBER_STATES == {"AX", "GF", "GP", "MF", "MQ", "RE", "YT"}  # inside the EU
    assert COUNTRY_SETS["EEA"] == eu | {"IS", "LI", "NO"}
    assert COUNTRY_SETS["EEA_UK_CH"] == COUNTRY_SETS["EEA"] | {"GB", "CH"}
    assert COUNTRY_SETS["EFTA"] == {"CH", "IS", "LI", "NO"}
    assert len(COUNTRY_SETS["ASEAN"]) == 11 and "TL" in COUNTRY_SETS["ASEAN"]
    assert COUNTRY_SETS["GCC"] == {"AE", "BH", "KW", "OM", "QA", "SA"}
    assert COUNTRY_SETS["FIVE_EYES"] == {"AU", "CA", "GB", "NZ", "US"}


@pytest.mark.parametrize("outside", ["RU", "BY", "UA", "CH", "GB", "FO", "GL", "SJ", "GI"])
def test_the_eea_leaves_out_what_continent_eu_holds(outside: str) -> None:
    assert outside not in COUNTRY_SETS["EEA"]


def test_unknown_set_names_raise() -> None:
    with pytest.raises(UnknownCountrySet, match="'EUROPE'"):
        set_countries(["EEA", "EUROPE"])
    with pytest.raises(UnknownCountrySet):
        ResidencyRule("r", frozenset(), frozenset(), ("eu-west",), sets=frozenset({"EU"}))


def test_a_rule_covers_the_union_of_countries_sets_and_continents() -> None:
    rule = ResidencyRule(
        "r", frozenset({"JP"}), frozenset({"OC"}), ("eu-west",), sets=frozenset({"GCC"})
    )
    assert rule.countries == COUNTRY_SETS["GCC"] | {"JP"}
    assert rule.listed_countries() == {"JP"}
    covered = covered_countries(rule.listed_countries(), rule.continents, rule.sets)
    oceania = {c for c, continent in CONTINENT_OF.items() if continent == "OC"}
    assert covered == COUNTRY_SETS["GCC"] | {"JP"} | oceania
    assert replace(rule, name="s").countries == rule.countries  # expanding twice changes nothing


@pytest.fixture
def eea_fleet() -> Fleet:
    return load_fleet_text(EEA_SETS)


@pytest.mark.parametrize("country", ["FR", "DE", "IS", "NO", "LI", "RE", "GF", "CH"])
def test_eea_and_listed_clients_may_only_use_the_rule_regions(
    eea_fleet: Fleet, country: str
) -> None:
    decision = allowed_regions(eea_fleet, country_location(country))
    assert decision.regions == ("eu-west",) and decision.rules == ("gdpr",)


@pytest.mark.parametrize("country", ["RU", "BY", "UA", "GB", "RS", "US"])
def test_clients_outside_the_sets_are_not_bound(eea_fleet: Fleet, country: str) -> None:
    assert allowed_regions(eea_fleet, country_location(country)).regions is None


def test_the_table_compiles_every_covered_country_and_binds_only_them(
    eea_fleet: Fleet, now: float
) -> None:
    zones = table_zones(eea_fleet)
    assert COUNTRY_SETS["EEA"] | {"CH"} <= set(zones)
    statuses = compile_table(eea_fleet, {}, now).regions
    down = {**statuses, "eu-west": replace(statuses["eu-west"], state=RegionState.DOWN)}
    table = compile_table(eea_fleet, down, now)
    for country in ("FR", "RE", "NO"):  # fail_open inside the rule, never across it
        assert {w.region for w in lookup(table, country_location(country), "m")} == {"eu-west"}
    ru = lookup(table, country_location("RU"), "m")  # continent EU, no rule: us-east serves
    assert {w.region for w in ru} == {"us-east"}


def test_stranded_zones_name_set_members(eea_fleet: Fleet, now: float) -> None:
    before = compile_table(eea_fleet, {}, now)
    closed = replace(eea_fleet, failover=replace(eea_fleet.failover, all_down=AllDown.FAIL_CLOSED))
    down = replace(before.regions["eu-west"], state=RegionState.DOWN)
    statuses = {**before.regions, "eu-west": down}
    after = compile_table(closed, statuses, now)
    zones = {s["zone"] for s in stranded_zones(eea_fleet, before, after)}
    assert {"FR", "IS", "CH"} <= zones and "RU" not in zones


def test_sets_round_trip_through_the_fleet_file(eea_fleet: Fleet) -> None:
    text = dump_fleet(eea_fleet)
    assert "sets: [EEA]" in text and "countries: [CH]" in text
    assert load_fleet_text(text) == eea_fleet


def test_an_unknown_set_is_an_error_naming_its_path() -> None:
    text = EEA_SETS.replace("sets: [EEA]", "sets: [EEA, EUROPE]")
    with pytest.raises(FleetError) as info:
        load_fleet_text(text)
    (issue,) = info.value.issues
    assert issue.path == "residency[0].clients.sets[1]"
    assert "unknown country set 'EUROPE'" in issue.message and "EEA_UK_CH" in issue.message


def test_a_rule_with_only_sets_is_valid_and_one_with_nothing_is_not() -> None:
    assert load_fleet_text(EEA_SETS.replace(", countries: [CH]", "")).residency[0].sets == {"EEA"}
    with pytest.raises(FleetError, match=r"residency\[0\]\.clients: .*country sets"):
        load_fleet_text(EEA_SETS.replace("sets: [EEA], countries: [CH]", "sets: []"))
