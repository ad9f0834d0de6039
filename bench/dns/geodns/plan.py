"""What every server answers: names, client zones and weighted regions, from one fleet.

The plan is compiled from the fleet the way the GeoDNS server compiles it before any
evidence (``static_table``: residency applied, nearest priority-1 regions, spill-over
weights), so PowerDNS and gdnsd are configured with exactly the answers this project's
server gives: the same zone, the same names (``<model>.<zone>`` and ``api.<zone>``), the same
client zones (country, then continent, then ``default``) and the same region addresses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from trafficmgr.dns.choice import merge_models
from trafficmgr.dns.zone import API_LABEL, model_label, split_addresses
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.routing.table import COUNTRY_PREFIX, DEFAULT_ZONE, static_table
from trafficmgr.routing.types import Fleet, RoutingTable

WEIGHT_UNITS = 1000  # PowerDNS and gdnsd take integer weights


@dataclass(frozen=True)
class ZoneAnswer:
    """The weighted regions one client zone gets for one name."""

    zone: str  # "GB", "EU", "default"; countries that are continent codes too: "country:NA"
    regions: tuple[tuple[str, int], ...]  # (region, integer weight), heaviest first

    @property
    def kind(self) -> str:
        """Return "country", "continent" or "default"."""
        if self.zone == DEFAULT_ZONE:
            return "default"
        if self.zone.startswith(COUNTRY_PREFIX) or not _continent(self.zone):
            return "country"
        return "continent"

    @property
    def code(self) -> str:
        """Return the bare ISO code of the zone (no prefix)."""
        return self.zone.removeprefix(COUNTRY_PREFIX)


@dataclass(frozen=True)
class Plan:
    """The zone, its names and per name the answers of each client zone."""

    zone: str
    ttl: int
    addresses: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]  # region → (v4, v6)
    names: dict[str, tuple[ZoneAnswer, ...]]  # label → answers per client zone
    table: RoutingTable

    def regions(self) -> list[str]:
        """Return the regions that have an address, in fleet order."""
        return [name for name, (v4, v6) in self.addresses.items() if v4 or v6]

    def answer_for(self, label: str, country: str | None, continent: str | None) -> ZoneAnswer:
        """Return what a client of this country and continent gets for ``label``."""
        by_zone = {a.zone: a for a in self.names[label]}
        keys = []
        if country:
            keys.append(f"{COUNTRY_PREFIX}{country}" if _continent(country) else country)
        if continent:
            keys.append(continent)
        keys.append(DEFAULT_ZONE)
        for key in keys:
            if key in by_zone:
                return by_zone[key]
        raise KeyError(label)


def _continent(code: str) -> bool:
    from trafficmgr.routing.countries import CONTINENTS

    return code in CONTINENTS


def make_plan(fleet_file: Path) -> Plan:
    """Compile the plan of a fleet file."""
    fleet = load_fleet_file(str(fleet_file))
    return plan_of(fleet)


def plan_of(fleet: Fleet) -> Plan:
    """Compile the plan of a fleet."""
    table = static_table(fleet, time.time())
    addresses = {}
    for region in fleet.regions:
        split = split_addresses(region.addresses)
        addresses[region.name] = (split.v4, split.v6)
    models = fleet.models()
    names: dict[str, tuple[ZoneAnswer, ...]] = {}
    for label, wanted in [(model_label(m), [m]) for m in models] + [(API_LABEL, models)]:
        answers = []
        for zone, lists in sorted(table.zones.items()):
            entries = merge_models([lists.get(m, ()) for m in wanted])
            if len(wanted) == 1:
                entries = lists.get(wanted[0], ())
            regions = [
                (w.region, max(1, round(w.weight * WEIGHT_UNITS)))
                for w in entries
                if w.weight > 0 and any(addresses.get(w.region, ((), ())))
            ]
            regions.sort(key=lambda item: (-item[1], item[0]))
            answers.append(ZoneAnswer(zone, tuple(regions)))
        names[label] = tuple(answers)
    return Plan(fleet.zone.rstrip(".").lower(), int(fleet.ttl), addresses, names, table)
