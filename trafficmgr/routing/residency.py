"""Residency: which regions may serve a client, from the fleet's residency rules.

Strict rules are hard constraints: a client matched by several strict rules may only go to
regions every one of them allows (their intersection, possibly empty: then nobody may serve
it, in any failure state). Preferred rules narrow the choice further to their regions while at
least one of those is available; only when all preferred regions are down does the decision
spill back to what the strict rules (or nothing) allow, and it says so (``spilled``).

A rule matches a client by its country (named, or a member of one of the rule's country sets,
``countrysets.py``: the union of both is ``rule.countries``) or by its continent (given, or
derived from the country). A client whose location is unknown (no continent: a private
address, no GeoIP answer, no ECS) matches no rule; the fleet's ``unlocated`` setting says what
it gets instead (``unlocated_decision``): nothing (``deny``), a rule's regions (strictly), a
zone's decision, or, by default, no restriction. Every front asks here, so all answer alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from trafficmgr.routing.countries import CONTINENTS, continent_of
from trafficmgr.routing.geo import continent_location, country_location
from trafficmgr.routing.types import (
    ClientLocation,
    Fleet,
    ResidencyMode,
    ResidencyRule,
    UnlocatedKind,
)


@dataclass(frozen=True, slots=True)
class ResidencyDecision:
    """Where a client may be served and why."""

    regions: tuple[str, ...] | None  # None: unrestricted
    strict: bool  # at least one strict rule applies
    preferred: tuple[str, ...] = ()  # regions preferred rules ask for (inside the strict set)
    rules: tuple[str, ...] = ()  # names of the matching rules
    reason: str = "no residency rule applies"
    spilled: bool = False  # every preferred region is down: spilled to the wider set
    strict_regions: tuple[str, ...] | None = None  # what the strict rules alone allow
    denied: bool = False  # the client cannot be located and the fleet denies such clients

    def allows(self, region: str) -> bool:
        """Tell whether ``region`` may serve the client."""
        return self.regions is None or region in self.regions


UNRESTRICTED = ResidencyDecision(regions=None, strict=False)
UNLOCATED = "client location unknown"


def rule_matches(rule: ResidencyRule, client: ClientLocation) -> bool:
    """Tell whether a residency rule covers a client."""
    country = client.country.upper() if client.country else None
    continent = client.continent or (continent_of(country) if country else None)
    if country is not None and country in rule.countries:
        return True
    return continent is not None and continent.upper() in rule.continents


def allowed_regions(
    fleet: Fleet, client: ClientLocation, down: Collection[str] = ()
) -> ResidencyDecision:
    """Decide which regions may serve ``client``; ``down`` names regions unable to serve now."""
    decision = base_decision(fleet, client)
    return apply_availability(decision, down) if down else decision


def base_decision(fleet: Fleet, client: ClientLocation) -> ResidencyDecision:
    """Decide from the rules alone, as if every preferred region were available."""
    matching = [rule for rule in fleet.residency if rule_matches(rule, client)]
    if not matching:
        if fleet.unlocated.kind is UnlocatedKind.UNRESTRICTED or client.located():
            return UNRESTRICTED
        return unlocated_decision(fleet)
    order = {r.name: i for i, r in enumerate(fleet.regions)}
    strict_rules = [r for r in matching if r.mode is ResidencyMode.STRICT]
    preferred_rules = [r for r in matching if r.mode is ResidencyMode.PREFERRED]
    names = tuple(r.name for r in matching)
    allowed: set[str] | None = None
    for rule in strict_rules:
        allowed = set(rule.regions) if allowed is None else allowed & set(rule.regions)
    regions = _ordered(allowed, order) if allowed is not None else None
    strict_text = _strict_text(strict_rules, regions)
    preferred = _preferred(preferred_rules, allowed, order)
    strict = bool(strict_rules)
    if not preferred_rules:
        return ResidencyDecision(regions, True, (), names, strict_text, strict_regions=regions)
    if not preferred:
        reason = f"{strict_text}; preferred rules ignored: no preferred region is allowed"
        return ResidencyDecision(regions, strict, (), names, reason.lstrip("; "), False, regions)
    pref_names = ", ".join(r.name for r in preferred_rules)
    reason = f"preferred {pref_names} → {', '.join(preferred)}"
    if strict_rules:
        reason = f"{strict_text}; {reason}"
    return ResidencyDecision(preferred, strict, preferred, names, reason, False, regions)


def unlocated_decision(fleet: Fleet) -> ResidencyDecision:
    """Decide for a client that cannot be located, as the fleet's ``unlocated`` setting says.

    A ``rule:NAME`` the fleet no longer has denies: the setting asked for a restriction, so
    its absence must not lift every restriction.
    """
    setting = fleet.unlocated
    text = f"{UNLOCATED}, unlocated_clients {setting}"
    if setting.kind is UnlocatedKind.ZONE:
        inner = base_decision(fleet, unlocated_stand_in(fleet))
        rules = inner.rules or (str(setting),)
        return replace(inner, rules=rules, reason=f"{text}: {inner.reason}")
    if setting.kind is UnlocatedKind.RULE:
        rule = next((r for r in fleet.residency if r.name == setting.target), None)
        if rule is not None:
            order = {r.name: i for i, r in enumerate(fleet.regions)}
            regions = _ordered(rule.regions, order)
            reason = f"{text} → {', '.join(regions)}"
            return ResidencyDecision(regions, True, (), (rule.name,), reason, False, regions)
        text = f"{text}: no such rule"
    return ResidencyDecision((), True, (), (str(setting),), text, False, (), denied=True)


def unlocated_stand_in(fleet: Fleet) -> ClientLocation:
    """Return where a client that cannot be located is taken to be (``zone:CODE``), else nowhere."""
    setting = fleet.unlocated
    if setting.kind is not UnlocatedKind.ZONE:
        return ClientLocation()
    if setting.target in CONTINENTS:
        return continent_location(setting.target)
    return country_location(setting.target)


def untrusted_proxy_warning(fleet: Fleet) -> str | None:
    """Say what a front trusting no proxy risks when the fleet has residency rules, or None."""
    if not fleet.residency:
        return None
    return (
        "no trusted proxy is configured and the fleet has residency rules: behind a load "
        "balancer or proxy every client is the proxy's address, and one that cannot be located "
        f"gets unlocated_clients {fleet.unlocated}; name the proxies with --trusted-proxy CIDR"
    )


def apply_availability(decision: ResidencyDecision, down: Collection[str]) -> ResidencyDecision:
    """Spill a preferred decision to the strict set when every preferred region is down."""
    if not decision.preferred or decision.spilled:
        return decision
    if any(r not in down for r in decision.preferred):
        return decision
    wider = decision.strict_regions
    target = ", ".join(wider) if wider is not None else "any region"
    reason = f"{decision.reason}; all preferred regions down: spilling to {target}"
    return replace(decision, regions=wider, spilled=True, reason=reason)


def _strict_text(rules: list[ResidencyRule], regions: tuple[str, ...] | None) -> str:
    """Describe what the strict rules allow."""
    if not rules:
        return ""
    listed = ", ".join(regions) if regions else "nothing"
    return f"strict {', '.join(r.name for r in rules)} → {listed}"


def _preferred(
    rules: list[ResidencyRule], allowed: set[str] | None, order: dict[str, int]
) -> tuple[str, ...]:
    """Return the preferred regions: all rules' common ones, else any one's, inside ``allowed``."""
    if not rules:
        return ()
    common = set(rules[0].regions)
    union: set[str] = set()
    for rule in rules:
        common &= set(rule.regions)
        union |= set(rule.regions)
    for candidate in (common, union):
        inside = candidate if allowed is None else candidate & allowed
        if inside:
            return _ordered(inside, order)
    return ()


def _ordered(names: Iterable[str], order: dict[str, int]) -> tuple[str, ...]:
    """Order region names as the fleet lists them (unknown names last, by name)."""
    return tuple(sorted(names, key=lambda n: (order.get(n, len(order)), n)))
