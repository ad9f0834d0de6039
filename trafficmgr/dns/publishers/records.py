"""Turn a routing table into the record sets an external authoritative server should hold.

Pure: no sockets, no clock. Names are the ones our own GeoDNS server answers
(``trafficmgr.dns.zone``): ``<model>.<zone>`` for each model (the label rule of
``model_label``) and ``api.<zone>`` for any model (the models' lists averaged, as the server
does). One client zone key (``DE``, ``EU``, ``country:NA``, ``default``) selects the list,
falling back country → continent → default like ``lookup``.

Plain records (RFC 2136 servers, PowerDNS without LUA): A and AAAA hold the ingress
addresses of the highest-weight region(s) of the list among the regions that have an
address of that family (ties: all of them), so a static server sends everyone where the
table sends most. TXT explains the answer; its first string starts with ``MARKER``, which
is also how a publisher recognises names it owns when it reads a zone back.

LUA records (PowerDNS with ``enable-lua-records``): one LUA record per family that lets the
server pick among *all* regions of the list by weight (``pickwrandom``), and with ``geo``
one ``if country(..)``/``if continent(..)`` branch per table zone whose answer differs from
its fallback (see ``lua_script``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass

from trafficmgr.dns.choice import merge_models
from trafficmgr.dns.publishers.errors import TableError, UnknownRegionError, UnknownZoneKeyError
from trafficmgr.dns.zone import API_LABEL, model_label
from trafficmgr.routing.countries import CONTINENTS, continent_of
from trafficmgr.routing.table import DEFAULT_ZONE, zone_keys
from trafficmgr.routing.types import ClientLocation, Fleet, RoutingTable, WeightedRegion

MARKER = "trafficmgr"
ADDRESS_TYPES = ("A", "AAAA")
MANAGED_TYPES = frozenset({"A", "AAAA", "TXT", "LUA"})
COUNTRY_PREFIX = "country:"
TXT_STRING_MAX = 255
TXT_REGIONS_MAX = 8
LUA_WEIGHT_UNITS = 10_000
_TIE = 1e-9

Lists = Mapping[str, tuple[WeightedRegion, ...]]


@dataclass(frozen=True, slots=True)
class DnsZone:
    """The DNS zone to publish into and the ingress addresses of every region."""

    name: str  # absolute and lower case: "infer.example.test."
    ttl: int
    addresses: Mapping[str, tuple[str, ...]]  # region → ingress addresses, IPv4 and IPv6
    models: tuple[str, ...] = ()  # models to publish; () → every model the table names

    @classmethod
    def make(
        cls,
        name: str,
        ttl: int,
        addresses: Mapping[str, Iterable[str]],
        models: Iterable[str] = (),
    ) -> DnsZone:
        """Build a zone description, normalising the name and checking the addresses."""
        try:
            origin = dns.name.from_text(name).to_text().lower()
        except ValueError as exc:
            raise TableError(f"bad zone name {name!r}: {exc}") from exc
        if ttl < 0:
            raise TableError(f"negative TTL {ttl}")
        checked: dict[str, tuple[str, ...]] = {}
        for region, texts in addresses.items():
            try:
                checked[region] = tuple(str(ipaddress.ip_address(t)) for t in texts)
            except ValueError as exc:
                raise TableError(f"region {region}: {exc}") from exc
        return cls(origin, int(ttl), checked, tuple(sorted(set(models))))

    @classmethod
    def from_fleet(cls, fleet: Fleet) -> DnsZone:
        """Describe the fleet's zone: its name, TTL, regions' addresses and models."""
        addresses = {r.name: r.addresses for r in fleet.regions}
        return cls.make(fleet.zone, fleet.ttl, addresses, fleet.models())

    def family(self, region: str, rtype: str) -> tuple[str, ...]:
        """Return a region's addresses of one family (``A`` → IPv4, ``AAAA`` → IPv6)."""
        version = 6 if rtype == "AAAA" else 4
        return tuple(
            a for a in self.addresses.get(region, ()) if ipaddress.ip_address(a).version == version
        )


@dataclass(frozen=True, slots=True)
class RecordSet:
    """One RRset: owner name (absolute, lower case), type, TTL and canonical values."""

    name: str
    rtype: str
    ttl: int
    values: frozenset[str]

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.rtype)


RecordSets = dict[tuple[str, str], RecordSet]


def canonical(rtype: str, text: str) -> str:
    """Return a value in one canonical presentation form, so values compare equal."""
    if rtype == "LUA":  # unknown to dnspython; PowerDNS hands back what it was given
        return text.strip()
    try:
        return str(dns.rdata.from_text(dns.rdataclass.IN, rtype, text).to_text())
    except (dns.exception.DNSException, ValueError):
        return text.strip()  # something odd someone else wrote: it differs, so it is replaced


def record_set(name: str, rtype: str, ttl: int, values: Iterable[str]) -> RecordSet:
    """Build a record set with canonical values."""
    return RecordSet(name.lower(), rtype, int(ttl), frozenset(canonical(rtype, v) for v in values))


def is_marker(rrset: RecordSet) -> bool:
    """Tell whether a TXT record set is one of ours."""
    return rrset.rtype == "TXT" and any(v.startswith(f'"{MARKER} ') for v in rrset.values)


def zone_fallbacks(key: str) -> tuple[str, ...]:
    """Return the table zones a client zone key falls back through, most specific first."""
    text = key.strip()
    if text == DEFAULT_ZONE:
        return (DEFAULT_ZONE,)
    if text.upper() in CONTINENTS and not text.lower().startswith(COUNTRY_PREFIX):
        return (text.upper(), DEFAULT_ZONE)
    code = text[len(COUNTRY_PREFIX) :] if text.lower().startswith(COUNTRY_PREFIX) else text
    if len(code) != 2 or continent_of(code) is None:
        raise UnknownZoneKeyError(key)
    return zone_keys(ClientLocation(country=code.upper()))


def client_lists(table: RoutingTable, key: str) -> tuple[str, Lists]:
    """Return the table zone a client zone key uses and its lists."""
    for candidate in zone_fallbacks(key):
        lists = table.zones.get(candidate)
        if lists is not None:
            return candidate, lists
    return DEFAULT_ZONE, {}


def check_regions(table: RoutingTable, zone: DnsZone) -> None:
    """Raise ``UnknownRegionError`` naming every listed region without known addresses."""
    listed = {w.region for lists in table.zones.values() for ws in lists.values() for w in ws}
    unknown = sorted(listed - zone.addresses.keys())
    if unknown:
        raise UnknownRegionError(unknown)


def routed_names(table: RoutingTable, zone: DnsZone) -> dict[str, str | None]:
    """Return owner name → model (None: ``api``, any model), as the GeoDNS server names them."""
    names: dict[str, str | None] = {}
    for model in published_models(table, zone):
        names.setdefault(f"{model_label(model)}.{zone.name}", model)
    names[f"{API_LABEL}.{zone.name}"] = None
    return names


def published_models(table: RoutingTable, zone: DnsZone) -> tuple[str, ...]:
    """Return the zone's models, or every model the table names when the zone lists none."""
    if zone.models:
        return zone.models
    return tuple(sorted({m for lists in table.zones.values() for m in lists}))


def entries_of(
    lists: Lists, model: str | None, models: Sequence[str]
) -> tuple[WeightedRegion, ...]:
    """Return a model's list (None: the models' lists averaged, like ``api.<zone>``)."""
    if model is not None:
        return lists.get(model, ())
    return merge_models([lists.get(m, ()) for m in models])


def top_regions(entries: Sequence[WeightedRegion], zone: DnsZone, rtype: str) -> tuple[str, ...]:
    """Return the highest-weight region(s) that have an address of the type's family."""
    usable = [w for w in entries if w.weight > 0 and zone.family(w.region, rtype)]
    if not usable:
        return ()
    best = max(w.weight for w in usable)
    return tuple(sorted(w.region for w in usable if best - w.weight <= _TIE))


def desired_records(
    table: RoutingTable, zone: DnsZone, client_zone: str = DEFAULT_ZONE
) -> RecordSets:
    """Return the plain A/AAAA/TXT record sets one client zone should be answered with."""
    check_regions(table, zone)
    used, lists = client_lists(table, client_zone)
    models = published_models(table, zone)
    out: RecordSets = {}
    for name, model in routed_names(table, zone).items():
        entries = entries_of(lists, model, models)
        answered: set[str] = set()
        for rtype in ADDRESS_TYPES:
            regions = top_regions(entries, zone, rtype)
            answered.update(regions)
            values = [a for r in regions for a in zone.family(r, rtype)]
            if values:
                _add(out, record_set(name, rtype, zone.ttl, values))
        head = _head(table, client_zone, used, model)
        note = _note(table, used, model, models)
        txt = explain(head, entries, answered, note)
        _add(out, record_set(name, "TXT", zone.ttl, [txt]))
    return out


def lua_records(table: RoutingTable, zone: DnsZone, geo: bool = False) -> RecordSets:
    """Return LUA record sets (weighted, and per country/continent with ``geo``) plus TXT."""
    check_regions(table, zone)
    used, lists = client_lists(table, DEFAULT_ZONE)
    models = published_models(table, zone)
    out: RecordSets = {}
    for name, model in routed_names(table, zone).items():
        contents = []
        branches = 0
        for rtype in ADDRESS_TYPES:
            if not any(zone.family(r, rtype) for r in zone.addresses):
                continue  # no region has an address of this family: leave the type out
            script, count = lua_script(table, zone, model, models, rtype, geo)
            branches = max(branches, count)
            contents.append(f'{rtype} "{script}"')
        entries = entries_of(lists, model, models)
        answered = {w.region for w in entries if w.weight > 0 and zone.addresses.get(w.region)}
        mode = f"lua=geo branches={branches}" if geo else "lua=weighted"
        head = f"{_head(table, DEFAULT_ZONE, used, model)} {mode}"
        txt = explain(head, entries, answered, _note(table, used, model, models))
        if contents:
            _add(out, record_set(name, "LUA", zone.ttl, contents))
        _add(out, record_set(name, "TXT", zone.ttl, [txt]))
    return out


def lua_script(
    table: RoutingTable,
    zone: DnsZone,
    model: str | None,
    models: Sequence[str],
    rtype: str,
    geo: bool,
) -> tuple[str, int]:
    """Return the Lua of one family's LUA record and how many geo branches it has.

    With ``geo``, countries come before continents (the more specific test first), and a
    zone gets a branch only when its answer differs from where it would otherwise fall
    (country → continent → default), which keeps the script short without changing any
    answer. Without a GeoIP backend every test is false and everyone gets the default.
    """
    picks = {
        key: lua_pick(entries_of(lists, model, models), zone, rtype)
        for key, lists in table.zones.items()
    }
    default = picks.get(DEFAULT_ZONE, "{}")
    branches: list[str] = []
    if geo:
        countries = sorted(k for k in picks if k != DEFAULT_ZONE and k not in CONTINENTS)
        continents = sorted(k for k in picks if k in CONTINENTS)
        for key in countries:
            code = key.removeprefix(COUNTRY_PREFIX)
            fallback = picks.get(continent_of(code) or "", default)
            if picks[key] != fallback:
                branches.append(f"if country('{code}') then return {picks[key]} end")
        for key in continents:
            if picks[key] != default:
                branches.append(f"if continent('{key}') then return {picks[key]} end")
    if not branches and default != "{}":
        return default, 0
    return ";" + " ".join([*branches, f"return {default}"]), len(branches)


def lua_pick(entries: Sequence[WeightedRegion], zone: DnsZone, rtype: str) -> str:
    """Return a ``pickwrandom`` over the regions' addresses (integer weights), or ``{}``."""
    items: list[str] = []
    for w in sorted(entries, key=lambda e: e.region):
        addresses = zone.family(w.region, rtype)
        if w.weight <= 0 or not addresses:
            continue
        units = max(1, round(w.weight * LUA_WEIGHT_UNITS / len(addresses)))
        items.extend(f"{{{units},'{a}'}}" for a in addresses)
    return f"pickwrandom({{{','.join(items)}}})" if items else "{}"


def explain(head: str, entries: Sequence[WeightedRegion], answered: set[str], note: str) -> str:
    """Return the TXT value (presentation form) that explains one name's answer."""
    strings = [head]
    for w in entries[:TXT_REGIONS_MAX]:
        flag = "yes" if w.region in answered else "no"
        strings.append(f"region={w.region} weight={w.weight:.4f} answered={flag} reason={w.reason}")
    if len(entries) > TXT_REGIONS_MAX:
        strings.append(f"+{len(entries) - TXT_REGIONS_MAX} more regions")
    if not entries:
        strings.append(f"no region: {note or 'none allowed'}")
    return " ".join(_quoted(s) for s in strings)


def _head(table: RoutingTable, asked: str, used: str, model: str | None) -> str:
    head = f"{MARKER} table={table.version} zone={used} model={model or 'any'}"
    return head if asked == used else f"{head} asked={asked}"


def _note(table: RoutingTable, used: str, model: str | None, models: Sequence[str]) -> str:
    notes = table.notes.get(used, {})
    if model is not None:
        return notes.get(model, "")
    return next((notes[m] for m in models if m in notes), "")


def _quoted(text: str) -> str:
    """Quote one TXT string: printable ASCII only, at most 255 octets."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text)[:TXT_STRING_MAX]
    return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _add(out: RecordSets, rrset: RecordSet) -> None:
    out[rrset.key] = rrset
