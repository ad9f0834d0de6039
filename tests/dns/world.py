"""The DNS tests' world: the demo fleet, MaxMind's test databases, queries and tables.

The named world: SE (89.160.20.128) is an EEA client under the strict ``gdpr`` rule (eu-west,
eu-central only); GB (81.2.69.142) is in Europe but outside the EEA, so no rule binds it and
the nearest regions (eu-west, eu-central) answer it by choice; US (216.160.83.56) is near
us-east, CN (175.16.199.1) and JP (2001:218::1) are in Asia near ap-southeast; 127.0.0.1 is
nowhere (the default zone).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.rdatatype
import pytest

from trafficmgr.dns.config import ServerConfig
from trafficmgr.dns.server import DnsServer
from trafficmgr.routing.types import (
    RegionState,
    RegionStatus,
    RoutingTable,
    WeightedRegion,
)

ROOT = Path(__file__).resolve().parents[2]
FLEET_FILE = ROOT / "examples" / "fleet.yaml"
GEOIP_DIR = Path(os.environ.get("TRAFFICMGR_TEST_GEOIP_DIR", ROOT / "tests" / "data" / "geoip"))
CITY_DB = GEOIP_DIR / "GeoIP2-City-Test.mmdb"
COUNTRY_DB = GEOIP_DIR / "GeoLite2-Country-Test.mmdb"

ZONE = "infer.example.test"
MODEL = "llama-3-70b"
NAME = f"{MODEL}.{ZONE}"
GB, SE, US, CN, JP = "81.2.69.142", "89.160.20.128", "216.160.83.56", "175.16.199.1", "2001:218::1"
EU_V4 = {"192.0.2.10", "192.0.2.20"}
EU_V6 = {"2001:db8:10::1", "2001:db8:20::1"}
US_V4 = {"198.51.100.10", "198.51.100.20"}
AP_V4 = {"203.0.113.10"}


def need_geoip() -> None:
    if not CITY_DB.exists():
        pytest.skip(f"MaxMind test databases not found in {GEOIP_DIR}")


def quiet_config(**overrides: Any) -> ServerConfig:
    """Server settings for tests: no state file, no rate limit, a free port."""
    base = ServerConfig(port=0, state_file=None, rrl_rate=0)
    return replace(base, **overrides)


def query(
    name: str = NAME,
    rdtype: str = "A",
    ecs: tuple[str, int] | None = None,
    edns: int | None = None,
    payload: int = 1232,
    options: Sequence[dns.edns.Option] = (),
) -> dns.message.QueryMessage:
    """Build a query; ``ecs`` is (address, source prefix)."""
    opts = list(options)
    if ecs is not None:
        opts.append(dns.edns.ECSOption(ecs[0], ecs[1]))
    use_edns = edns if edns is not None else (0 if opts else None)
    if use_edns is None:
        return dns.message.make_query(name, rdtype, use_edns=False)
    return dns.message.make_query(name, rdtype, use_edns=use_edns, payload=payload, options=opts)


def ask(
    server: DnsServer,
    message: dns.message.Message | bytes,
    source: str = "127.0.0.1",
    tcp: bool = False,
) -> dns.message.Message:
    """Send a query through the handler and parse the reply (which must exist)."""
    wire = message if isinstance(message, bytes) else message.to_wire()
    reply = server.handle(wire, source, tcp)
    assert reply is not None, "the server dropped the query"
    return dns.message.from_wire(reply)


def addresses(reply: dns.message.Message) -> set[str]:
    """Return the A/AAAA addresses of a reply's answer section."""
    return {
        rdata.to_text()
        for rrset in reply.answer
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)
        for rdata in rrset
    }


def txt(reply: dns.message.Message) -> str:
    """Return the TXT strings of a reply, joined by newlines."""
    return "\n".join(
        s.decode()
        for rrset in reply.answer
        if rrset.rdtype == dns.rdatatype.TXT
        for rdata in rrset
        for s in rdata.strings
    )


def ecs_of(reply: dns.message.Message) -> dns.edns.ECSOption | None:
    found = [o for o in reply.options if isinstance(o, dns.edns.ECSOption)]
    assert len(found) <= 1
    return found[0] if found else None


def header(wire: bytes) -> tuple[int, int, int, int, int, int]:
    """Return id, flags, qdcount, ancount, nscount, arcount."""
    return struct.unpack_from("!HHHHHH", wire)


def rcode_of(wire: bytes) -> int:
    return header(wire)[1] & 0xF


def status(state: RegionState, headroom: float = 0.5) -> RegionStatus:
    return RegionStatus(state, headroom, 1000.0, state.value)


def make_table(
    version: str,
    zones: Mapping[str, Mapping[str, Sequence[tuple[str, float]]]],
    regions: Mapping[str, RegionState] | None = None,
    notes: Mapping[str, Mapping[str, str]] | None = None,
) -> RoutingTable:
    """Build a routing table by hand: zone → model → [(region, weight)]."""
    states = regions or {}
    return RoutingTable(
        version=version,
        generated_at=time.time(),
        regions={name: status(state) for name, state in states.items()},
        zones={
            zone: {
                model: tuple(WeightedRegion(r, w, f"{r} picked by test") for r, w in entries)
                for model, entries in lists.items()
            }
            for zone, lists in zones.items()
        },
        notes=notes or {},
    )


def everywhere(entries: Sequence[tuple[str, float]], version: str = "t1") -> RoutingTable:
    """A table that answers ``entries`` for every model in every zone."""
    lists = {"llama-3-70b": entries, "llama-3-8b": entries}
    return make_table(version, {z: lists for z in ("EU", "GB", "NA", "AS", "default")})


def is_flag(reply: dns.message.Message, flag: dns.flags.Flag) -> bool:
    return bool(reply.flags & flag)
