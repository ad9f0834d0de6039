"""Check with dig that a server gives the plan's geo answers for MaxMind's test addresses."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.dns.geodns.plan import Plan

# MaxMind's test addresses (GeoIP2-City-Test.mmdb): GB, GB, SE, US, CN, SG, AU, PH, BT, JP (v6),
# and one the database does not know.
TEST_CLIENTS = (
    "81.2.69.142",
    "2.125.160.216",
    "89.160.20.128",
    "216.160.83.56",
    "175.16.199.1",
    "214.0.0.1",
    "214.0.1.1",
    "202.196.224.1",
    "67.43.156.1",
    "2001:218::1",
    "198.18.0.1",
)


@dataclass
class Check:
    client: str  # an address, or "(source)" for a query without ECS
    name: str
    rdtype: str
    place: str
    expected: set[str]
    got: set[str]
    ecs_echoed: bool

    @property
    def ok(self) -> bool:
        return len(self.got) == 1 and self.got <= self.expected and self.ecs_echoed


def place_of(database: Path, address: str | None) -> tuple[str | None, str | None]:
    """Return the country and continent codes the database gives an address (None: unknown)."""
    if address is None:
        return None, None
    import geoip2.database
    import geoip2.errors

    with geoip2.database.Reader(str(database)) as reader:
        try:
            city = reader.city(address)
        except (geoip2.errors.AddressNotFoundError, ValueError):
            return None, None
    return city.country.iso_code, city.continent.code


def dig(port: int, name: str, rdtype: str, subnet: str | None) -> tuple[set[str], bool]:
    """Ask with dig; return the answer's addresses and whether a Client Subnet came back."""
    args = ["dig", "@127.0.0.1", "-p", str(port), name, rdtype, "+tries=2", "+time=2"]
    if subnet is not None:
        args.append(f"+subnet={subnet}")
    text = subprocess.run(args, capture_output=True, text=True, check=False).stdout
    section = (
        text.split(";; ANSWER SECTION:", 1)[1].split("\n\n", 1)[0]
        if "ANSWER SECTION" in text
        else ""
    )
    got = set(re.findall(rf"\bIN\s+{rdtype}\s+(\S+)", section))
    return got, subnet is None or "CLIENT-SUBNET" in text


def verify(plan: Plan, port: int, database: Path) -> list[Check]:
    """Ask for every name, A and AAAA, as each test client with ECS, and once without."""
    checks = []
    for client in (*TEST_CLIENTS, None):
        country, continent = place_of(database, client)
        subnet = None if client is None else f"{client}/{128 if ':' in client else 32}"
        for label in plan.names:
            answer = plan.answer_for(label, country, continent)
            for rdtype, index in (("A", 0), ("AAAA", 1)):
                expected = {a for r, _ in answer.regions for a in plan.addresses[r][index]}
                got, echoed = dig(port, f"{label}.{plan.zone}", rdtype, subnet)
                where = f"{country or '-'}/{continent or '-'} → {answer.zone}"
                checks.append(
                    Check(client or "(source)", label, rdtype, where, expected, got, echoed)
                )
    return checks
