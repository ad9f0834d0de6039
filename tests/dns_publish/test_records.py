"""The table → record sets step, as a pure function (no server)."""

from __future__ import annotations

import dataclasses

import dns.rdata
import dns.rdataclass
import pytest
from dns.rdtypes.ANY.TXT import TXT

from tests.dns_publish.world import (
    AP_SOUTH_V4,
    EU_WEST_V4,
    EU_WEST_V6,
    US_EAST_V4,
    make_table,
    make_zone,
    table_v1,
)
from trafficmgr.dns.publishers import DnsZone, TableError, UnknownRegionError, desired_records
from trafficmgr.dns.publishers.records import RecordSets, lua_pick, zone_fallbacks
from trafficmgr.routing.types import WeightedRegion

ZONE = make_zone()


def values(records: RecordSets, label: str, rtype: str) -> set[str]:
    found = records.get((f"{label}.infer.example.test.", rtype))
    return set(found.values) if found else set()


def txt(records: RecordSets, label: str) -> str:
    (value,) = values(records, label, "TXT")
    return value


def test_a_and_aaaa_hold_the_highest_weight_region_of_each_family() -> None:
    records = desired_records(table_v1(), ZONE)

    assert values(records, "llama-3-70b", "A") == {US_EAST_V4}  # 0.6 beats eu-west's 0.4
    assert values(records, "llama-3-70b", "AAAA") == {EU_WEST_V6}  # us-east has no IPv6
    assert values(records, "llama-3-8b", "AAAA") == set()
    assert {r.ttl for r in records.values()} == {10}
    assert len(records) == 8


def test_tied_regions_are_all_answered() -> None:
    table = make_table(
        "tie000000001", {"default": {"llama-3-70b": [("eu-west", 0.5), ("us-east", 0.5)]}}
    )

    records = desired_records(table, make_zone(models=("llama-3-70b",)))

    assert values(records, "llama-3-70b", "A") == {EU_WEST_V4, US_EAST_V4}
    assert "answered=yes" in txt(records, "llama-3-70b").split("us-east")[1]


def test_api_averages_the_models_lists() -> None:
    table = make_table(
        "api000000001",
        {
            "default": {
                "llama-3-70b": [("eu-west", 1.0)],
                "llama-3-8b": [("ap-south", 0.6), ("eu-west", 0.4)],
            }
        },
    )

    records = desired_records(table, ZONE)

    assert values(records, "api", "A") == {EU_WEST_V4}  # (1.0 + 0.4) / 2 > 0.6 / 2
    assert "model=any" in txt(records, "api")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("default", ("default",)),
        ("EU", ("EU", "default")),
        ("de", ("DE", "EU", "default")),
        ("AS", ("AS", "default")),  # bare AS is the continent Asia
        ("country:AS", ("country:AS", "OC", "default")),  # American Samoa
        ("country:NA", ("country:NA", "AF", "default")),  # Namibia
    ],
)
def test_client_zone_keys_fall_back_like_lookup(key: str, expected: tuple[str, ...]) -> None:
    assert zone_fallbacks(key) == expected


def test_a_client_zone_missing_from_the_table_uses_its_continent() -> None:
    records = desired_records(table_v1(), ZONE, client_zone="DE")

    assert values(records, "llama-3-70b", "A") == {EU_WEST_V4}
    assert txt(records, "llama-3-70b").startswith(
        '"trafficmgr table=v1a1a1a1a1a1 zone=EU model=llama-3-70b asked=DE"'
    )
    assert values(desired_records(table_v1(), ZONE, "IN"), "llama-3-8b", "A") == {AP_SOUTH_V4}


def test_an_empty_list_has_no_addresses_and_says_why() -> None:
    table = make_table(
        "closed000001",
        {"default": {"llama-3-70b": [], "llama-3-8b": [("eu-west", 1.0)]}},
        notes={"default": {"llama-3-70b": "fail_closed: every allowed region is down"}},
    )

    records = desired_records(table, ZONE)

    assert values(records, "llama-3-70b", "A") == set()
    assert values(records, "llama-3-70b", "AAAA") == set()
    assert '"no region: fail_closed: every allowed region is down"' in txt(records, "llama-3-70b")


def test_model_names_become_labels_as_the_geodns_server_asks_for_them() -> None:
    zone = DnsZone.make("infer.example.test", 10, {"eu-west": [EU_WEST_V4]}, ["Meta/Llama-3.1"])
    table = make_table("label0000001", {"default": {"Meta/Llama-3.1": [("eu-west", 1.0)]}})

    records = desired_records(table, zone)

    assert values(records, "meta-llama-3-1", "A") == {EU_WEST_V4}


def test_txt_strings_are_printable_ascii_of_at_most_255_octets() -> None:
    reason = 'spill "over" → ' + "x" * 400
    base = make_table("txt000000001", {})
    entries = (WeightedRegion("eu-west", 1.0, reason),)
    table = dataclasses.replace(base, zones={"default": {"llama-3-70b": entries}})

    value = txt(desired_records(table, make_zone(models=("llama-3-70b",))), "llama-3-70b")

    rdata = dns.rdata.from_text(dns.rdataclass.IN, "TXT", value)
    assert isinstance(rdata, TXT)
    strings: list[bytes] = list(rdata.strings)
    assert all(len(s) <= 255 and s.isascii() for s in strings)
    assert b'spill "over" ? xxx' in strings[1]


def test_unknown_regions_are_all_named() -> None:
    table = make_table(
        "unknown00001",
        {"default": {"llama-3-70b": [("mars-north", 0.5), ("eu-west", 0.3), ("venus-1", 0.2)]}},
    )

    with pytest.raises(UnknownRegionError, match="mars-north, venus-1"):
        desired_records(table, ZONE)


def test_bad_zone_descriptions_are_refused() -> None:
    with pytest.raises(TableError, match="eu-west"):
        DnsZone.make("infer.example.test", 10, {"eu-west": ["not-an-address"]})


def test_lua_weights_are_integers_split_over_a_regions_addresses() -> None:
    zone = DnsZone.make("z.test", 10, {"a": ["192.0.2.1", "192.0.2.2"], "b": ["192.0.2.3"]})
    entries = [WeightedRegion("a", 0.75, ""), WeightedRegion("b", 0.25, "")]

    assert lua_pick(entries, zone, "A") == (
        "pickwrandom({{3750,'192.0.2.1'},{3750,'192.0.2.2'},{2500,'192.0.2.3'}})"
    )
    assert lua_pick(entries, zone, "AAAA") == "{}"
