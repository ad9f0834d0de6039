"""Compile the global routing table: per client zone and model, weighted regions with reasons.

Zones are every country of ``fleet.clients`` (or of ``zones`` when given), every country a
residency rule names, every continent and ``default``; lookups fall back country →
continent → default. Rule countries and continents are always compiled, so a lookup can
never fall through to a zone with weaker rules. Country codes that are also continent codes
(AS, NA, SA) are keyed ``country:AS`` etc.; the continents keep the bare codes.

How one list is weighed: ``weighting.py`` (with ``previous``, spillover moves from the
previous table's shares, damped by the time since it). Then:

6. With ``previous``, at most ``max_shift_per_tick`` of a list's weight moves per compile,
   except that weight always leaves regions that are no longer eligible (down, drained,
   forbidden) at once: safety first.
7. Weights are rounded to 4 decimals with the largest-remainder method, so each list sums
   to exactly 10,000 units of 0.0001; a list is empty only when nothing may be answered,
   and ``notes`` then says why.

The version is a short hash of the region states and every list (weights and reasons), so
the same inputs give the same table and version; ``generated_at`` is not part of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from trafficmgr.routing.countries import CONTINENTS, continent_of
from trafficmgr.routing.geo import continent_location, country_location, rtt_ms
from trafficmgr.routing.health import config_status
from trafficmgr.routing.residency import ResidencyDecision, base_decision, unlocated_stand_in
from trafficmgr.routing.spillover import spill_damping
from trafficmgr.routing.table_diff import TableDiff, diff_tables
from trafficmgr.routing.table_json import content_version, table_from_json, table_to_json
from trafficmgr.routing.types import (
    ClientLocation,
    Fleet,
    GeoPoint,
    RegionStatus,
    ResidencyMode,
    RoutingTable,
    WeightedRegion,
)
from trafficmgr.routing.weighting import (
    Entry,
    ZoneList,
    model_candidates,
    region_view,
    weigh_list,
)

__all__ = [
    "TableDiff",
    "compile_table",
    "diff_tables",
    "lookup",
    "static_table",
    "table_from_json",
    "table_to_json",
    "zone_keys",
    "zone_location",
]

DEFAULT_ZONE = "default"
COUNTRY_PREFIX = "country:"  # for AS, NA, SA: country codes that are also continent codes
WEIGHT_UNITS = 10_000
_Layout = tuple[tuple[GeoPoint, int], ...]
_Distances = tuple[tuple[float, ...] | None, tuple[int, ...]]
_RTT_CACHE: dict[_Layout, dict[GeoPoint | None, _Distances]] = {}
_RTT_CACHE_LIMIT = 64
_ZONE_PLANS: dict[tuple[object, ...], list[tuple[str, ClientLocation, ResidencyDecision]]] = {}
_ZONE_PLANS_LIMIT = 16

Lists = dict[str, tuple[WeightedRegion, ...]]


def zone_of_country(country: str) -> str:
    """Return the zone key of a country (prefixed when the code is also a continent code)."""
    code = country.upper()
    return f"{COUNTRY_PREFIX}{code}" if code in CONTINENTS else code


def zone_keys(client: ClientLocation) -> tuple[str, ...]:
    """Return the zones to try for a client, most specific first, e.g. ("DE", "EU", "default")."""
    keys: list[str] = []
    country = client.country.upper() if client.country else None
    if country:
        keys.append(zone_of_country(country))
    continent = client.continent or (continent_of(country) if country else None)
    if continent and continent.upper() in CONTINENTS:
        keys.append(continent.upper())
    keys.append(DEFAULT_ZONE)
    return tuple(keys)


def zone_location(zone: str) -> ClientLocation:
    """Return where a zone's clients are, as far as the zone tells."""
    if zone == DEFAULT_ZONE:
        return ClientLocation()
    if zone.startswith(COUNTRY_PREFIX):
        return country_location(zone[len(COUNTRY_PREFIX) :])
    if zone in CONTINENTS:
        return continent_location(zone)
    return country_location(zone)


def lookup(table: RoutingTable, client: ClientLocation, model: str) -> tuple[WeightedRegion, ...]:
    """Return the weighted regions for a client and model (country → continent → default)."""
    for key in zone_keys(client):
        lists = table.zones.get(key)
        if lists is not None:
            return lists.get(model, ())
    return ()


def table_zones(fleet: Fleet, zones: Iterable[str] | None = None) -> tuple[str, ...]:
    """Return the zones to compile: client countries (or ``zones``), rule countries, continents."""
    wanted: set[str] = set()
    if zones is None:
        wanted.update(zone_of_country(c.country) for c in fleet.clients if continent_of(c.country))
    else:
        wanted.update(key for key in map(_zone_key, zones) if key is not None)
    for rule in fleet.residency:
        wanted.update(zone_of_country(c) for c in rule.countries if continent_of(c))
    wanted.update(CONTINENTS)
    wanted.add(DEFAULT_ZONE)
    return tuple(sorted(wanted))


def _zone_key(name: str) -> str | None:
    """Normalise a zone name; None when it is no country, continent or ``default``.

    A bare AS, NA or SA names the continent; ``country:NA`` names the country.
    """
    text = str(name).strip()
    if text == DEFAULT_ZONE or text.upper() in CONTINENTS:
        return text if text == DEFAULT_ZONE else text.upper()
    code = text[len(COUNTRY_PREFIX) :] if text.startswith(COUNTRY_PREFIX) else text
    return zone_of_country(code) if continent_of(code) else None


def static_table(fleet: Fleet, now: float) -> RoutingTable:
    """Compile the table from configuration alone (residency applied), before any evidence."""
    statuses = {r.name: config_status(r, fleet.gpu_profiles, now) for r in fleet.regions}
    return compile_table(fleet, statuses, now)


def compile_table(
    fleet: Fleet,
    statuses: Mapping[str, RegionStatus],
    now: float,
    previous: RoutingTable | None = None,
    zones: Iterable[str] | None = None,
) -> RoutingTable:
    """Compile the routing table from the fleet and the regions' statuses."""
    views = [region_view(i, r, statuses.get(r.name), fleet) for i, r in enumerate(fleet.regions)]
    models = fleet.models()
    per_model = {m: model_candidates(views, m) for m in models}
    layout = tuple((v.region.location, v.region.priority) for v in views)
    cache = _distance_cache(layout)
    out_zones: dict[str, Lists] = {}
    notes: dict[str, dict[str, str]] = {}
    damping = spill_damping(fleet, previous.generated_at if previous else None, now)
    for zone, client, decision in _zone_plan(fleet, zones):
        rtts, order = _distances(cache, layout, client.point)
        lists: Lists = {}
        old_lists = previous.zones.get(zone, {}) if previous is not None else {}
        for model in models:
            old = old_lists.get(model, ())
            listed = weigh_list(fleet, decision, per_model[model], rtts, order, old, damping)
            result: Sequence[Entry] = listed.entries
            if old and result:
                result = _limit_shift(old, listed, fleet.failover.max_shift_per_tick)
            lists[model] = _rounded(result)
            if listed.note:
                notes.setdefault(zone, {})[model] = listed.note
        out_zones[zone] = lists
    region_statuses = {v.region.name: v.status for v in views}
    version = content_version(region_statuses, out_zones)
    return RoutingTable(version, now, region_statuses, out_zones, notes)


def _zone_plan(
    fleet: Fleet, zones: Iterable[str] | None
) -> list[tuple[str, ClientLocation, ResidencyDecision]]:
    """Return the zones to compile with their clients' location and residency decision.

    They depend on the rules, the regions' names and the zones only, so they are kept across
    compiles of the same fleet.
    """
    wanted = None if zones is None else tuple(zones)
    regions = tuple(r.name for r in fleet.regions)
    key = (fleet.residency, regions, fleet.clients, wanted, fleet.unlocated)
    plan = _ZONE_PLANS.get(key)
    if plan is None:
        plan = []
        for zone in table_zones(fleet, wanted):
            client = zone_location(zone)
            decision = base_decision(fleet, client)
            if zone == DEFAULT_ZONE:  # clients that cannot be located: nearest to the stand-in
                client = unlocated_stand_in(fleet)
            plan.append((zone, client, decision))
        if len(_ZONE_PLANS) >= _ZONE_PLANS_LIMIT:
            _ZONE_PLANS.clear()
        _ZONE_PLANS[key] = plan
    return plan


def clear_distance_cache() -> None:
    """Forget the cached RTTs and zone plans (for benchmarks of a cold compile)."""
    _RTT_CACHE.clear()
    _ZONE_PLANS.clear()


def _distance_cache(layout: _Layout) -> dict[GeoPoint | None, _Distances]:
    """Return the RTT cache of a fleet layout (kept across compiles: zones never move)."""
    per_layout = _RTT_CACHE.get(layout)
    if per_layout is None:
        if len(_RTT_CACHE) >= _RTT_CACHE_LIMIT:
            _RTT_CACHE.clear()
        per_layout = _RTT_CACHE.setdefault(layout, {})
    return per_layout


def _distances(
    cache: dict[GeoPoint | None, _Distances], layout: _Layout, where: GeoPoint | None
) -> _Distances:
    """Return the RTT from ``where`` to each region and the regions by (priority, RTT)."""
    found = cache.get(where)
    if found is None:
        if where is None:
            rtts = None
            order = tuple(sorted(range(len(layout)), key=lambda i: layout[i][1]))
        else:
            rtts = tuple(rtt_ms(where, point) for point, _ in layout)
            order = tuple(sorted(range(len(layout)), key=lambda i: (layout[i][1], rtts[i])))
        found = cache[where] = (rtts, order)
    return found


def _limit_shift(old: Sequence[WeightedRegion], new: ZoneList, max_shift: float) -> Sequence[Entry]:
    """Move at most ``max_shift`` of the weight; weight on non-carriers leaves at once."""
    target = _normalised(new.entries)
    carriers = new.carriers
    kept = new.kept
    if kept is None:
        kept = {w.region: w.weight for w in old if w.region in carriers and w.weight > 0}
    forced = 1.0 - sum(kept.values())
    start = dict(kept)
    share = max(0.0, forced)
    get = start.get
    for region, weight in target.items():
        start[region] = get(region, 0.0) + share * weight
    moved = 0.0
    # Summed in name order: set order follows per-process string hashing, and the last bits
    # of this sum can tip the rounding, so another process would publish another version.
    regions = sorted(start.keys() | target)  # all in ``start``
    target_of = target.get
    for r in regions:
        moved += abs(target_of(r, 0.0) - start[r])
    moved /= 2
    if moved <= max_shift + 1e-9:
        return new.entries
    step = max_shift / moved
    entries = {w.region: w for w in new.entries}
    limited = f"; shift limited to {max_shift:.0%} per tick"
    out = []
    for region in regions:
        was = start[region]
        weight = was + (target_of(region, 0.0) - was) * step
        entry = entries.get(region)
        reason = (entry.reason if entry is not None else "phasing out") + limited
        out.append(WeightedRegion(region, weight, reason))
    return out


def _normalised(entries: Sequence[Entry]) -> dict[str, float]:
    total = sum([w.weight for w in entries]) or 1.0
    out: dict[str, float] = {}
    for w in entries:
        out[w.region] = out.get(w.region, 0.0) + w.weight / total
    return out


def _rounded(entries: Sequence[Entry]) -> tuple[WeightedRegion, ...]:
    """Round weights to 1/WEIGHT_UNITS summing to exactly 1 (largest remainder), sort them."""
    positive = [w for w in entries if w.weight > 0]
    total = sum([w.weight for w in positive])
    if total <= 0:
        return ()
    regions = [w.region for w in positive]
    scaled = [w.weight / total * WEIGHT_UNITS for w in positive]
    units = [int(s) for s in scaled]
    spare = WEIGHT_UNITS - sum(units)
    if spare:
        # smallest (units - scaled) first, ties by region then position
        remainders = [u - s for u, s in zip(units, scaled, strict=True)]
        by_remainder = sorted(zip(remainders, regions, range(len(units)), strict=True))
        for _, _, i in by_remainder[:spare]:
            units[i] += 1
    # heaviest first, ties by region; sorting the units sorts the weights
    order = sorted([(-u, regions[i], i) for i, u in enumerate(units) if u > 0])
    return tuple([WeightedRegion(r, -n / WEIGHT_UNITS, positive[i].reason) for n, r, i in order])


def stranded_zones(fleet: Fleet, before: RoutingTable, after: RoutingTable) -> list[dict[str, str]]:
    """Return strict residency zones that had an eligible region and would have none."""
    out = []
    for rule in fleet.residency:
        if rule.mode is not ResidencyMode.STRICT:
            continue
        zones = [zone_of_country(c) for c in sorted(rule.countries)] + sorted(rule.continents)
        for zone in zones:
            for model, entries in before.zones.get(zone, {}).items():
                if entries and not after.zones.get(zone, {}).get(model):
                    out.append({"rule": rule.name, "zone": zone, "model": model})
    return out
