"""The benchmark's queries: A and AAAA for every routed name, most with an ECS option.

Client subnets are spread over the GeoIP2 test database's networks (each as a /24 or /56
source prefix, or the network's own length when it is longer, so that the subnet lies inside
it and gets that network's place) and over random prefixes the database does not know (the
default zone). dnsperf reads the file in its binary format (``-B``: two-byte length, then the
message), which keeps each query's own ECS option.
"""

from __future__ import annotations

import ipaddress
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import dns.edns
import dns.message

V4_SOURCE = 24
V6_SOURCE = 56


@dataclass(frozen=True)
class QueryMix:
    names: tuple[str, ...]  # fully qualified
    count: int = 20_000
    ecs_share: float = 0.85
    known_share: float = 0.5  # of the ECS queries: subnets inside the database's networks
    unknown_prefixes: int = 3000
    aaaa_share: float = 0.3
    seed: int = 1


def known_subnets(database: Path) -> list[tuple[str, int]]:
    """Return one (address, source prefix) per network of a GeoIP2 database that has a place."""
    import maxminddb

    out = []
    with maxminddb.open_database(str(database)) as reader:
        for network, record in reader:
            if not isinstance(record, dict) or not (
                record.get("country") or record.get("continent")
            ):
                continue
            if network.version == 6 and network.subnet_of(ipaddress.ip_network("::/96")):
                continue  # the IPv4 part of the tree, seen again as IPv4
            floor = V4_SOURCE if network.version == 4 else V6_SOURCE
            source = max(floor, network.prefixlen)
            address = ipaddress.ip_network(f"{network.network_address}/{source}", strict=False)
            out.append((str(address.network_address), source))
    return out


def unknown_subnets(count: int, rng: random.Random) -> list[tuple[str, int]]:
    """Return random /24 (most) and /56 prefixes: clients the test database cannot place."""
    out = []
    for _ in range(count):
        if rng.random() < 0.9:
            octets = (rng.randrange(1, 224), rng.randrange(256), rng.randrange(256))
            out.append(("{}.{}.{}.0".format(*octets), V4_SOURCE))
        else:
            groups = (rng.randrange(10), rng.randrange(1, 0xFFFF), rng.randrange(256))
            out.append(("2a0{:x}:{:x}:{:x}00::".format(*groups), V6_SOURCE))
    return out


def make_queries(mix: QueryMix, database: Path | None) -> tuple[list[bytes], float]:
    """Return the queries (wire form) and the share of them that carry ECS."""
    rng = random.Random(mix.seed)
    known = known_subnets(database) if database is not None and database.exists() else []
    unknown = unknown_subnets(mix.unknown_prefixes, rng)
    out = []
    with_ecs = 0
    for _ in range(mix.count):
        name = rng.choice(mix.names)
        rdtype = "AAAA" if rng.random() < mix.aaaa_share else "A"
        if rng.random() < mix.ecs_share:
            with_ecs += 1
            pool = known if known and rng.random() < mix.known_share else unknown
            address, source = rng.choice(pool)
            option = dns.edns.ECSOption(address, source)
            message = dns.message.make_query(name, rdtype, use_edns=0, options=[option])
        else:
            message = dns.message.make_query(name, rdtype, use_edns=False)
        out.append(message.to_wire())
    return out, with_ecs / max(1, len(out))


def write_binary(queries: list[bytes], path: Path) -> None:
    """Write queries in dnsperf's binary input format."""
    path.write_bytes(b"".join(struct.pack("!H", len(q)) + q for q in queries))
