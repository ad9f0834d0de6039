"""A small builder of fleet files (docs/architecture.md §4), for the worlds and for fleets a
test or benchmark derives.

Each piece returns YAML text in the house spelling (flow mappings, two-space indents), so the
pieces concatenate into a fleet file that ``trafficmgr.fleetfile.load_fleet_text`` accepts;
the sites and GPU profiles the worlds share are spelled once here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ZONE = "infer.example.test"
# the fleet files' line length, as the sources': a longer endpoint wraps before its models
WIDTH = 100

PROFILES = {
    "H100": "{prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}",
    "A100": "{prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}",
    "L4": "{prefill_tokens_per_s: 1500, decode_tokens_per_s: 350, max_concurrency: 16}",
}


@dataclass(frozen=True)
class Site:
    """Where a region is: its country, its coordinates and its first public address."""

    country: str
    location: str
    address: str


SITES = {
    "eu-west": Site("IE", "{lat: 53.35, lon: -6.26}", "192.0.2.10"),
    "eu-central": Site("DE", "{lat: 50.11, lon: 8.68}", "192.0.2.20"),
    "us-east": Site("US", "{lat: 39.04, lon: -77.49}", "198.51.100.10"),
    "ap-south": Site("IN", "{lat: 19.08, lon: 72.88}", "203.0.113.30"),
    "ap-southeast": Site("SG", "{lat: 1.29, lon: 103.85}", "203.0.113.10"),
}

# EU clients may only use the two EU regions
GDPR_RULE = (
    "{name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}"
)


def header(zone: str = ZONE, ttl: int | None = 10) -> str:
    """Return the zone and TTL lines (no TTL line for ``None``)."""
    return f"zone: {zone}\n" + (f"ttl: {ttl}\n" if ttl is not None else "")


def gpu_profiles(*names: str, **custom: str) -> str:
    """Return a ``gpu_profiles`` block of the named shared profiles, then ``custom`` ones."""
    lines = [f"  {name}: {PROFILES[name]}" for name in names]
    lines += [f"  {name}: {spec}" for name, spec in custom.items()]
    return "gpu_profiles:\n" + "".join(line + "\n" for line in lines)


def endpoint(name: str, address: str, gpu: str, gpus: int, models: Iterable[str]) -> str:
    """Return one endpoint line (two when longer than the fleet files' width)."""
    head = f'      - {{name: {name}, address: "{address}", gpu: {gpu}, gpus: {gpus},'
    tail = f"models: [{', '.join(models)}]}}"
    if len(head) + 1 + len(tail) <= WIDTH:
        return f"{head} {tail}\n"
    return f"{head}\n         {tail}\n"


def region(
    name: str,
    *endpoints: str,
    addresses: str | None = None,
    priority: int | None = None,
    state: str | None = None,
    site: Site | None = None,
) -> str:
    """Return a region at its known site (or ``site``) with ``endpoints`` (from ``endpoint``).

    ``addresses`` is the flow list's inside, the site's one address by default.
    """
    where = site or SITES[name]
    text = f"  - name: {name}\n    country: {where.country}\n    location: {where.location}\n"
    text += f"    addresses: [{addresses or where.address}]\n"
    if priority is not None:
        text += f"    priority: {priority}\n"
    if state is not None:
        text += f"    state: {state}\n"
    return text + "    endpoints:\n" + "".join(endpoints)


def regions(*blocks: str) -> str:
    """Return the ``regions`` block of ``region`` blocks."""
    return "regions:\n" + "".join(blocks)


def residency(*rules: str) -> str:
    """Return a ``residency`` block of flow-mapping rules (``GDPR_RULE`` or others)."""
    return "residency:\n" + "".join(f"  - {rule}\n" for rule in rules)


def clients(*shares: tuple[str, float]) -> str:
    """Return a ``clients`` block of (country, share) pairs."""
    return "clients:\n" + "".join(f"  - {{country: {c}, share: {s:g}}}\n" for c, s in shares)
