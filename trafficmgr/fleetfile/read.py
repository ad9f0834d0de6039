"""Read and validate the declarative fleet file (docs/architecture.md §4) without Django.

Errors name the path inside the file (``regions[2].endpoints[0].gpu``) and, where
YAML can tell it, the line. Aliases are refused, which also defuses YAML bombs.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trafficmgr.fleetfile.safeyaml import (
    MAX_BYTES,
    FleetError,
    FleetIssue,
    join_path,
    parse_yaml,
)
from trafficmgr.routing.countries import CONTINENTS, continent_of
from trafficmgr.routing.countrysets import COUNTRY_SETS, SET_NAMES
from trafficmgr.routing.types import (
    AdminState,
    AllDown,
    ClientShare,
    Endpoint,
    FailoverPolicy,
    Fleet,
    GeoPoint,
    GpuProfile,
    Region,
    ResidencyMode,
    ResidencyRule,
    ServiceObjective,
    UnlocatedClients,
    UnlocatedKind,
)


def load_fleet_text(data: str | bytes) -> Fleet:
    """Parse and validate fleet YAML; raise FleetError naming every bad path."""
    raw, lines = parse_yaml(data)
    return fleet_from_dict(raw, lines)


def load_fleet_file(path: str) -> Fleet:
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    return load_fleet_text(data)


class _Reader:
    """Walks the parsed document, collecting issues instead of stopping at the first."""

    def __init__(self, lines: Mapping[str, int]) -> None:
        self.lines = lines
        self.issues: list[FleetIssue] = []

    def error(self, path: str, message: str) -> None:
        self.issues.append(FleetIssue(path, message, self.line_of(path)))

    def line_of(self, path: str) -> int | None:
        """The line of ``path`` or of its nearest parent the parser saw."""
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            parent = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", path)
            # A top-level key ("zone") has no separator: its parent is the document.
            path = parent if parent != path else ""

    def mapping(
        self, value: Any, path: str, allowed: set[str], required: set[str]
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.error(path or "fleet", f"expected a mapping, got {_kind(value)}")
            return {}
        for key in value:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                self.error(join_path(path, key), f"unknown key (allowed: {known})")
        for key in sorted(required - set(value)):
            self.error(join_path(path, key), "required key is missing")
        return value

    def seq(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"expected a list, got {_kind(value)}")
            return []
        return value

    def string(self, value: Any, path: str, max_len: int = 253) -> str:
        if not isinstance(value, str) or not value.strip():
            self.error(path, f"expected a non-empty string, got {_kind(value)}")
            return ""
        if len(value) > max_len:
            self.error(path, f"longer than {max_len} characters")
        return value

    def number(
        self,
        value: Any,
        path: str,
        low: float,
        high: float,
        *,
        integer: bool = False,
        low_open: bool = False,
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(path, f"expected a number, got {_kind(value)}")
            return low
        if integer and not isinstance(value, int):
            self.error(path, f"expected an integer, got {value!r}")
            return low
        if math.isnan(value) or value < low or value > high or (low_open and value == low):
            lo = f"> {low}" if low_open else f">= {low}"
            self.error(path, f"{value!r} out of range ({lo} and <= {high})")
            return low
        number: float = value
        return number

    def choice(self, value: Any, path: str, choices: tuple[str, ...]) -> str:
        if value not in choices:
            self.error(path, f"{value!r} is not one of {', '.join(choices)}")
            return choices[0]
        return str(value)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _check_name(r: _Reader, value: Any, path: str) -> str:
    name = r.string(value, path, 63)
    if name and not all(c.isalnum() or c in "-_." for c in name):
        r.error(path, f"{name!r} may only hold letters, digits, '-', '_' and '.'")
    return name


def parse_address(value: str) -> tuple[str, int | None]:
    """Split ``host:port`` / ``[v6]:port`` / bare IP; raise ValueError when malformed."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        ipaddress.IPv6Address(host)
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError(f"{value!r} is not [IPv6]:port")
        return host, _port(rest[1:])
    if value.count(":") == 1:
        host, port = value.split(":")
        _host(host)
        return host, _port(port)
    _host(value)
    return value, None


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"port {text!r} is not 1-65535")
    return int(text)


def _host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if labels[-1].isdigit():
        raise ValueError(f"{host!r} is not a valid IP address")
    if (
        not host
        or len(host) > 253
        or not all(
            0 < len(lbl) <= 63 and lbl.replace("-", "").isalnum() and not lbl.startswith("-")
            for lbl in labels
        )
    ):
        raise ValueError(f"{host!r} is neither an IP address nor a host name")


FLEET_KEYS = {
    "zone",
    "ttl",
    "gpu_profiles",
    "regions",
    "residency",
    "unlocated_clients",
    "failover",
    "clients",
    "slo",
}
REGION_KEYS = {
    "name",
    "country",
    "location",
    "addresses",
    "priority",
    "weight",
    "state",
    "endpoints",
}
ENDPOINT_KEYS = {"name", "address", "gpu", "gpus", "models", "weight", "state"}
PROFILE_KEYS = {"prefill_tokens_per_s", "decode_tokens_per_s", "max_concurrency"}
RULE_KEYS = {"name", "clients", "regions", "mode"}
CLIENT_KEYS = {"countries", "continents", "sets"}
NO_CLIENTS = "a residency rule must name client countries, country sets or continents"


@dataclass(frozen=True)
class Bound:
    """The allowed range of one numeric failover setting (fleet file, API and admin)."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False

    def check(self, value: float) -> str | None:
        """Say what is wrong with ``value``, or None."""
        if self.integer and value != int(value):
            return "must be an integer"
        if value < self.low or value > self.high or (self.low_open and value == self.low):
            low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
            return f"must be {low} and <= {self.high:g}"
        return None


FAILOVER_RANGES: dict[str, Bound] = {
    "heartbeat_interval_s": Bound(0.05, 3600),
    "miss_threshold": Bound(1, 100, integer=True),
    "up_threshold": Bound(1, 100, integer=True),
    "down_threshold": Bound(1, 100, integer=True),
    "hold_down_s": Bound(0, 86400),
    "slow_start_s": Bound(0, 86400),
    "spillover_headroom": Bound(0, 0.9),
    "max_shift_per_tick": Bound(0, 1, low_open=True),
}
FAILOVER_KEYS = {*FAILOVER_RANGES, "all_down"}


def fleet_from_dict(raw: Any, lines: Mapping[str, int] | None = None) -> Fleet:
    """Validate a parsed fleet document and build the engine's Fleet."""
    r = _Reader(lines or {})
    doc = r.mapping(raw, "", FLEET_KEYS, {"zone", "regions"})
    zone = r.string(doc.get("zone"), "zone").rstrip(".").lower() if "zone" in doc else ""
    if zone:
        try:
            _host(zone)
        except ValueError as exc:
            r.error("zone", str(exc))
    ttl = int(r.number(doc.get("ttl", 10), "ttl", 0, 86400, integer=True))
    profiles = _profiles(r, doc.get("gpu_profiles"))
    regions = _regions(r, doc.get("regions"), profiles)
    names = {reg.name for reg in regions}
    residency = _residency(r, doc.get("residency"), names)
    unlocated = _unlocated(r, doc.get("unlocated_clients", "unrestricted"), residency)
    failover = _failover(r, doc.get("failover"))
    clients = _clients(r, doc.get("clients"))
    slo = _slo(r, doc.get("slo"), {m for reg in regions for e in reg.endpoints for m in e.models})
    if "regions" in doc and not regions and not r.issues:
        r.error("regions", "a fleet needs at least one region")
    if r.issues:
        raise FleetError(r.issues)
    return Fleet(
        zone=zone,
        ttl=ttl,
        gpu_profiles=profiles,
        regions=regions,
        residency=residency,
        failover=failover,
        clients=clients,
        slo=slo,
        unlocated=unlocated,
    )


def _unlocated(r: _Reader, value: Any, residency: tuple[ResidencyRule, ...]) -> UnlocatedClients:
    """Read ``unlocated_clients``; a ``rule:NAME`` must name a rule of ``residency``."""
    try:
        setting = UnlocatedClients.parse(value)
    except ValueError as exc:
        r.error("unlocated_clients", str(exc))
        return UnlocatedClients()
    rules = {rule.name for rule in residency}
    if setting.kind is UnlocatedKind.RULE and setting.target not in rules:
        r.error("unlocated_clients", f"no residency rule is named {setting.target!r}")
    return setting


MAX_TTFT_MS = 3_600_000.0


def _slo(r: _Reader, value: Any, models: set[str]) -> ServiceObjective:
    """Read the service objective: a default TTFT p99 and per-model ones (all optional)."""
    if value is None:
        return ServiceObjective()
    doc = r.mapping(value, "slo", {"ttft_p99_ms", "models"}, set())
    default = ServiceObjective().ttft_p99_ms
    if "ttft_p99_ms" in doc:
        default = r.number(doc["ttft_p99_ms"], "slo.ttft_p99_ms", 0, MAX_TTFT_MS, low_open=True)
    per_model: dict[str, float] = {}
    listed = doc.get("models")
    keys = set(listed) if isinstance(listed, dict) else set()
    names = r.mapping(listed, "slo.models", keys, set()) if listed is not None else {}
    for model, spec in names.items():
        path = f"slo.models.{model}"
        if str(model) not in models:
            r.error(path, f"no endpoint serves model {model!r}")
        objective = r.mapping(spec, path, {"ttft_p99_ms"}, {"ttft_p99_ms"})
        if "ttft_p99_ms" in objective:
            per_model[str(model)] = r.number(
                objective["ttft_p99_ms"], f"{path}.ttft_p99_ms", 0, MAX_TTFT_MS, low_open=True
            )
    return ServiceObjective(default, per_model)


DEFAULT_PROFILES = {
    "H100": GpuProfile("H100", 12000, 2400, 64),
    "A100": GpuProfile("A100", 6000, 1300, 48),
    "L4": GpuProfile("L4", 1500, 350, 16),
}


def _profiles(r: _Reader, value: Any) -> dict[str, GpuProfile]:
    if value is None:
        return dict(DEFAULT_PROFILES)
    doc = r.mapping(value, "gpu_profiles", set(value) if isinstance(value, dict) else set(), set())
    out: dict[str, GpuProfile] = {}
    for name, spec in doc.items():
        path = f"gpu_profiles.{name}"
        _check_name(r, name, path)
        s = r.mapping(spec, path, PROFILE_KEYS, PROFILE_KEYS)
        if len(s) != len(PROFILE_KEYS) or set(s) != PROFILE_KEYS:
            continue
        out[name] = GpuProfile(
            name=name,
            prefill_tokens_per_s=r.number(
                s["prefill_tokens_per_s"], f"{path}.prefill_tokens_per_s", 0, 1e9, low_open=True
            ),
            decode_tokens_per_s=r.number(
                s["decode_tokens_per_s"], f"{path}.decode_tokens_per_s", 0, 1e9, low_open=True
            ),
            max_concurrency=int(
                r.number(s["max_concurrency"], f"{path}.max_concurrency", 1, 1e6, integer=True)
            ),
        )
    return out


def _unique(r: _Reader, seen: set[str], name: str, path: str, what: str) -> None:
    if name in seen:
        r.error(path, f"duplicate {what} name {name!r}")
    seen.add(name)


def _regions(r: _Reader, value: Any, profiles: Mapping[str, GpuProfile]) -> tuple[Region, ...]:
    regions: list[Region] = []
    region_names: set[str] = set()
    endpoint_names: set[str] = set()
    for i, item in enumerate(r.seq(value, "regions")):
        path = f"regions[{i}]"
        doc = r.mapping(item, path, REGION_KEYS, {"name", "country", "location", "addresses"})
        name = _check_name(r, doc.get("name"), f"{path}.name") if "name" in doc else ""
        _unique(r, region_names, name, f"{path}.name", "region")
        country = ""
        continent = ""
        if "country" in doc:
            country = r.string(doc["country"], f"{path}.country", 2).upper()
            continent = continent_of(country) or ""
            if country and not continent:
                r.error(f"{path}.country", f"{country!r} is not an ISO 3166-1 alpha-2 code")
        point = _location(r, doc.get("location"), f"{path}.location") if "location" in doc else None
        addresses = _addresses(r, doc.get("addresses"), f"{path}.addresses")
        endpoints = _endpoints(r, doc.get("endpoints"), path, name, profiles, endpoint_names)
        regions.append(
            Region(
                name=name,
                country=country,
                continent=continent,
                location=point or GeoPoint(0.0, 0.0),
                addresses=addresses,
                endpoints=endpoints,
                priority=int(
                    r.number(doc.get("priority", 1), f"{path}.priority", 0, 1000, integer=True)
                ),
                weight=float(r.number(doc.get("weight", 1.0), f"{path}.weight", 0, 1000)),
                admin_state=AdminState(
                    r.choice(
                        doc.get("state", "active"),
                        f"{path}.state",
                        tuple(s.value for s in AdminState),
                    )
                ),
            )
        )
    return tuple(regions)


def _location(r: _Reader, value: Any, path: str) -> GeoPoint | None:
    doc = r.mapping(value, path, {"lat", "lon"}, {"lat", "lon"})
    if "lat" not in doc or "lon" not in doc:
        return None
    return GeoPoint(
        r.number(doc["lat"], f"{path}.lat", -90, 90), r.number(doc["lon"], f"{path}.lon", -180, 180)
    )


def _addresses(r: _Reader, value: Any, path: str) -> tuple[str, ...]:
    out: list[str] = []
    items = r.seq(value, path)
    if value is not None and not items and isinstance(value, list):
        r.error(path, "a region needs at least one ingress address")
    for j, addr in enumerate(items):
        apath = f"{path}[{j}]"
        text = r.string(addr, apath, 64)
        try:
            out.append(str(ipaddress.ip_address(text)))
        except ValueError:
            if text:
                r.error(apath, f"{text!r} is not an IPv4 or IPv6 address")
    return tuple(out)


def _endpoints(
    r: _Reader,
    value: Any,
    rpath: str,
    region: str,
    profiles: Mapping[str, GpuProfile],
    seen: set[str],
) -> tuple[Endpoint, ...]:
    out: list[Endpoint] = []
    for j, item in enumerate(r.seq(value, f"{rpath}.endpoints")):
        path = f"{rpath}.endpoints[{j}]"
        doc = r.mapping(item, path, ENDPOINT_KEYS, {"name", "address", "gpu", "gpus", "models"})
        if not doc:
            continue
        name = _check_name(r, doc.get("name"), f"{path}.name") if "name" in doc else ""
        _unique(r, seen, name, f"{path}.name", "endpoint")
        address = r.string(doc.get("address"), f"{path}.address") if "address" in doc else ""
        if address:
            try:
                parse_address(address)
            except ValueError as exc:
                r.error(f"{path}.address", f"{address!r} is not host:port or an IP address ({exc})")
        gpu = r.string(doc.get("gpu"), f"{path}.gpu", 63) if "gpu" in doc else ""
        if gpu and gpu not in profiles:
            r.error(f"{path}.gpu", f"unknown GPU profile {gpu!r}")
        gpus = int(r.number(doc.get("gpus", 1), f"{path}.gpus", 1, 4096, integer=True))
        models: list[str] = []
        for k, m in enumerate(r.seq(doc.get("models"), f"{path}.models")):
            models.append(_check_name(r, m, f"{path}.models[{k}]"))
        if "models" in doc and not models:
            r.error(f"{path}.models", "an endpoint must serve at least one model")
        out.append(
            Endpoint(
                name=name,
                region=region,
                address=address,
                gpu=gpu,
                gpus=gpus,
                models=tuple(models),
                weight=float(r.number(doc.get("weight", 1.0), f"{path}.weight", 0, 1000)),
                admin_state=AdminState(
                    r.choice(
                        doc.get("state", "active"),
                        f"{path}.state",
                        tuple(s.value for s in AdminState),
                    )
                ),
            )
        )
    return tuple(out)


def _residency(r: _Reader, value: Any, regions: set[str]) -> tuple[ResidencyRule, ...]:
    out: list[ResidencyRule] = []
    names: set[str] = set()
    for i, item in enumerate(r.seq(value, "residency")):
        path = f"residency[{i}]"
        doc = r.mapping(item, path, RULE_KEYS, {"name", "clients", "regions"})
        name = _check_name(r, doc.get("name"), f"{path}.name") if "name" in doc else ""
        _unique(r, names, name, f"{path}.name", "residency rule")
        clients = r.mapping(doc.get("clients", {}), f"{path}.clients", CLIENT_KEYS, set())
        sets = _country_sets(r, clients.get("sets"), f"{path}.clients.sets")
        countries = frozenset(
            str(r.string(c, f"{path}.clients.countries[{k}]", 2)).upper()
            for k, c in enumerate(r.seq(clients.get("countries"), f"{path}.clients.countries"))
        )
        continents = frozenset(
            str(r.string(c, f"{path}.clients.continents[{k}]", 2)).upper()
            for k, c in enumerate(r.seq(clients.get("continents"), f"{path}.clients.continents"))
        )
        for c in sorted(countries):
            if c and continent_of(c) is None:
                r.error(f"{path}.clients.countries", f"{c!r} is not an ISO 3166-1 alpha-2 code")
        for c in sorted(continents):
            if c and c not in CONTINENTS:
                r.error(
                    f"{path}.clients.continents",
                    f"{c!r} is not a continent code ({', '.join(sorted(CONTINENTS))})",
                )
        if "clients" in doc and not countries and not continents and not sets:
            r.error(f"{path}.clients", NO_CLIENTS)
        allowed: list[str] = []
        for k, reg in enumerate(r.seq(doc.get("regions"), f"{path}.regions")):
            text = r.string(reg, f"{path}.regions[{k}]", 63)
            if text and text not in regions:
                r.error(f"{path}.regions[{k}]", f"unknown region {text!r}")
            allowed.append(text)
        if "regions" in doc and not allowed:
            r.error(f"{path}.regions", "a residency rule must allow at least one region")
        mode = r.choice(
            doc.get("mode", "strict"), f"{path}.mode", tuple(m.value for m in ResidencyMode)
        )
        out.append(
            ResidencyRule(
                name=name,
                countries=countries,
                continents=continents,
                regions=tuple(allowed),
                mode=ResidencyMode(mode),
                sets=sets,
            )
        )
    return tuple(out)


def _country_sets(r: _Reader, value: Any, path: str) -> frozenset[str]:
    """Read a rule's country set names; an unknown one is an error naming its index."""
    names: set[str] = set()
    for k, item in enumerate(r.seq(value, path)):
        name = r.string(item, f"{path}[{k}]", 32)
        if name and name not in COUNTRY_SETS:
            r.error(f"{path}[{k}]", f"unknown country set {name!r} (known: {', '.join(SET_NAMES)})")
        elif name:
            names.add(name)
    return frozenset(names)


def _failover(r: _Reader, value: Any) -> FailoverPolicy:
    if value is None:
        return FailoverPolicy()
    doc = r.mapping(value, "failover", FAILOVER_KEYS, set())
    default = FailoverPolicy()
    numbers: dict[str, Any] = {}
    for key, bound in FAILOVER_RANGES.items():
        raw = doc.get(key, getattr(default, key))
        got = r.number(
            raw,
            f"failover.{key}",
            bound.low,
            bound.high,
            integer=bound.integer,
            low_open=bound.low_open,
        )
        numbers[key] = int(got) if bound.integer else got
    all_down = r.choice(
        doc.get("all_down", default.all_down.value),
        "failover.all_down",
        tuple(a.value for a in AllDown),
    )
    return FailoverPolicy(**numbers, all_down=AllDown(all_down))


def _clients(r: _Reader, value: Any) -> tuple[ClientShare, ...]:
    out: list[ClientShare] = []
    for i, item in enumerate(r.seq(value, "clients")):
        path = f"clients[{i}]"
        doc = r.mapping(item, path, {"country", "share"}, {"country", "share"})
        if "country" not in doc or "share" not in doc:
            continue
        country = r.string(doc["country"], f"{path}.country", 2).upper()
        if country and continent_of(country) is None:
            r.error(f"{path}.country", f"{country!r} is not an ISO 3166-1 alpha-2 code")
        out.append(
            ClientShare(country, r.number(doc["share"], f"{path}.share", 0, 1, low_open=True))
        )
    total = sum(c.share for c in out)
    if out and abs(total - 1.0) > 0.01:
        r.error("clients", f"shares sum to {total:.3f}, expected 1")
    return tuple(out)
