"""PowerDNS Authoritative over its HTTP API: plain records, weighted and geo LUA records."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.dns_publish.conftest import PowerDns
from tests.dns_publish.servers import soa_serial
from tests.dns_publish.world import (
    EU_WEST_V4,
    EU_WEST_V6,
    US_EAST_V4,
    ask,
    fqdn,
    make_table,
    make_zone,
    table_v1,
    table_v2,
)
from trafficmgr.dns.publishers import AuthError, PowerDnsTarget, RetryPolicy

pytestmark = pytest.mark.integration


def rrsets(pdns: PowerDns) -> dict[tuple[str, str], list[str]]:
    request = urllib.request.Request(
        f"{pdns.api_url}/api/v1/servers/localhost/zones/infer.example.test.",
        headers={"X-API-Key": pdns.api_key},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        doc = json.load(response)
    return {(r["name"], r["type"]): [x["content"] for x in r["records"]] for r in doc["rrsets"]}


def test_creates_the_zone_and_patches_only_changed_rrsets(powerdns: PowerDns) -> None:
    target = PowerDnsTarget(make_zone(), powerdns.api_url, powerdns.api_key)

    first = target.publish(table_v1())
    assert (first.source, first.created, first.update_ops) == ("api (zone missing)", 8, 8)
    assert first.messages == 2  # POST zone, PATCH rrsets
    assert target.metrics.get("zones_created") == 1
    assert ask(powerdns.port, fqdn("llama-3-70b"), "A") == {US_EAST_V4}
    assert ask(powerdns.port, fqdn("llama-3-70b"), "AAAA") == {EU_WEST_V6}
    serial = soa_serial(powerdns.port)

    second = target.publish(table_v2())
    assert (second.source, second.created, second.updated, second.deleted) == ("api", 0, 4, 0)
    assert (second.update_ops, second.messages) == (4, 1)  # 4 rrsets in one PATCH
    assert ask(powerdns.port, fqdn("llama-3-70b"), "A") == {EU_WEST_V4}
    assert (soa_serial(powerdns.port) or 0) > (serial or 0)

    again = target.publish(table_v2())
    assert (again.update_ops, again.messages) == (0, 0)


def test_weighted_lua_records_replace_the_plain_ones(powerdns: PowerDns) -> None:
    PowerDnsTarget(make_zone(), powerdns.api_url, powerdns.api_key).publish(table_v1())
    lua = PowerDnsTarget(make_zone(), powerdns.api_url, powerdns.api_key, lua="weighted")

    result = lua.publish(table_v1())

    # per name: plain A (+ AAAA) deleted, LUA created, TXT updated
    assert (result.created, result.deleted, result.updated) == (3, 5, 3)
    records = rrsets(powerdns)
    assert ("llama-3-70b.infer.example.test.", "A") not in records
    assert records[("llama-3-70b.infer.example.test.", "LUA")] == [
        f"A \"pickwrandom({{{{4000,'{EU_WEST_V4}'}},{{6000,'{US_EAST_V4}'}}}})\"",
        f"AAAA \"pickwrandom({{{{4000,'{EU_WEST_V6}'}}}})\"",
    ]
    answers = set()
    for _ in range(30):
        answers |= ask(powerdns.port, fqdn("llama-3-70b"), "A")
    assert answers <= {EU_WEST_V4, US_EAST_V4} and answers  # a weighted pick of the list
    assert ask(powerdns.port, fqdn("llama-3-8b"), "A") == {US_EAST_V4}  # weight 1.0
    assert ask(powerdns.port, fqdn("llama-3-8b"), "AAAA") == set()  # us-east has no IPv6


def test_geo_lua_records_branch_per_zone_and_fall_back_to_default(powerdns: PowerDns) -> None:
    table = make_table(
        "geo000000001",
        {
            "default": {"llama-3-70b": [("us-east", 1.0)]},
            "EU": {"llama-3-70b": [("eu-west", 1.0)]},
            "DE": {"llama-3-70b": [("eu-west", 1.0)]},  # same as EU: no branch of its own
            "IN": {"llama-3-70b": [("ap-south", 1.0)]},
        },
    )
    zone = make_zone(models=("llama-3-70b",))
    target = PowerDnsTarget(zone, powerdns.api_url, powerdns.api_key, lua="geo")

    target.publish(table)

    (a, aaaa) = rrsets(powerdns)[("llama-3-70b.infer.example.test.", "LUA")]
    assert a == (
        "A \";if country('IN') then return pickwrandom({{10000,'203.0.113.30'}}) end "
        "if continent('EU') then return pickwrandom({{10000,'192.0.2.10'}}) end "
        "return pickwrandom({{10000,'198.51.100.10'}})\""
    )
    assert aaaa == (  # IN falls back to default, which has no IPv6 either: no branch
        "AAAA \";if continent('EU') then return pickwrandom({{10000,'2001:db8:10::1'}}) end "
        'return {}"'
    )
    # no geoip backend here: every country()/continent() test is false → the default list
    assert ask(powerdns.port, fqdn("llama-3-70b"), "A") == {US_EAST_V4}
    assert ask(powerdns.port, fqdn("llama-3-70b"), "AAAA") == set()
    (txt,) = ask(powerdns.port, fqdn("llama-3-70b"), "TXT")
    assert "lua=geo branches=2" in txt


def test_a_wrong_api_key_is_an_auth_error_and_counted(powerdns: PowerDns) -> None:
    target = PowerDnsTarget(
        make_zone(), powerdns.api_url, "not-the-key", retry=RetryPolicy(attempts=3)
    )

    with pytest.raises(AuthError, match="rejected the API key"):
        target.publish(table_v1())

    assert target.metrics.get("errors_auth") == 1
    assert target.metrics.get("api_requests") == 1  # not retried
