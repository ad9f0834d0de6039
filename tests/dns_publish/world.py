"""The small world the publisher tests publish: three regions, two models, two tables.

eu-west has IPv4 and IPv6, us-east and ap-south IPv4 only. Table v1 sends the default zone's
llama-3-70b mostly to us-east; v2 tips it to eu-west and changes nothing else, so exactly
one A record set (and, since the version changes, every TXT) differs between them.
"""

from __future__ import annotations

from collections.abc import Mapping

import dns.message
import dns.query
import dns.rdatatype

from trafficmgr.dns.publishers import DnsZone
from trafficmgr.routing.types import RegionState, RegionStatus, RoutingTable, WeightedRegion

ADDRESSES = {
    "eu-west": ("192.0.2.10", "2001:db8:10::1"),
    "us-east": ("198.51.100.10",),
    "ap-south": ("203.0.113.30",),
}
MODELS = ("llama-3-70b", "llama-3-8b")
EU_WEST_V4, EU_WEST_V6 = ADDRESSES["eu-west"]
US_EAST_V4 = ADDRESSES["us-east"][0]
AP_SOUTH_V4 = ADDRESSES["ap-south"][0]

Spec = Mapping[str, Mapping[str, list[tuple[str, float]]]]


def make_zone(models: tuple[str, ...] = MODELS, ttl: int = 10) -> DnsZone:
    return DnsZone.make("infer.example.test", ttl, ADDRESSES, models)


def make_table(
    version: str, spec: Spec, notes: Mapping[str, Mapping[str, str]] | None = None
) -> RoutingTable:
    """Build a routing table from zone → model → [(region, weight)]."""
    regions = {name: RegionStatus(RegionState.HEALTHY, 0.5, 1000.0, "ok") for name in ADDRESSES}
    zones = {
        zone: {
            model: tuple(WeightedRegion(r, w, f"test weight {w}") for r, w in entries)
            for model, entries in lists.items()
        }
        for zone, lists in spec.items()
    }
    return RoutingTable(version, 1_800_000_000.0, regions, zones, notes or {})


V1: Spec = {
    "default": {
        "llama-3-70b": [("us-east", 0.6), ("eu-west", 0.4)],
        "llama-3-8b": [("us-east", 1.0)],
    },
    "EU": {
        "llama-3-70b": [("eu-west", 1.0)],
        "llama-3-8b": [("eu-west", 0.7), ("us-east", 0.3)],
    },
    "IN": {"llama-3-70b": [("ap-south", 1.0)], "llama-3-8b": [("ap-south", 1.0)]},
}
V2: Spec = {
    **V1,
    "default": {**V1["default"], "llama-3-70b": [("eu-west", 0.55), ("us-east", 0.45)]},
}


def table_v1() -> RoutingTable:
    return make_table("v1a1a1a1a1a1", V1)


def table_v2() -> RoutingTable:
    return make_table("v2b2b2b2b2b2", V2)


def ask(port: int, name: str, rtype: str, source: str = "127.0.0.1") -> set[str]:
    """Query 127.0.0.1:port from ``source``; return the answer's values (empty: none).

    Over UDP, then TCP when the answer is truncated (a TXT explaining five regions is longer
    than 512 octets), as a resolver does.
    """
    query = dns.message.make_query(name, rtype)
    response, _ = dns.query.udp_with_fallback(
        query, "127.0.0.1", port=port, source=source, timeout=2
    )
    wanted = dns.rdatatype.from_text(rtype)
    return {rd.to_text() for rrset in response.answer if rrset.rdtype == wanted for rd in rrset}


def fqdn(label: str) -> str:
    return f"{label}.infer.example.test."
