"""Guardrails of a drill, checked before it starts and while its fault lasts.

Everything is computed by the engine, from the same heartbeats and machines the control loop
uses, with the drill's endpoints taken out as if drained (``fault_fleet``): no second copy of
its rules lives here.

- **Capacity:** the serving capacity left during the fault (decode tokens/s, the engine's
  live figures; a throttled endpoint keeps ``1 - THROTTLE_PENALTY`` of its own) must cover
  the current demand (each region's capacity x the engine's demand figure) plus the policy's
  ``spillover_headroom`` — the margin the engine itself keeps before spilling.
- **Capacity per strict residency zone:** the same test inside each strict rule's regions, for
  every rule whose regions the drill touches: a fault in eu-west may leave the fleet plenty
  while the clients only EU regions may serve run short. The regions are the ones the engine
  allows the rule's zones (``residency.base_decision``, as the table compiles them; a client
  also bound by a narrower rule is checked under that rule too); the demand is the figure
  above summed over those regions, which also counts what other clients send there.
- **Residency:** the table compiled fail_closed with the fault must leave every strict
  residency zone that has an eligible region now with one
  (``trafficmgr.routing.table.stranded_zones``).
- **Target:** not drained or disabled (nothing to practise; never forceable), not already
  down, automatic failover not paused (the drill would be a real outage).
- **One drill at a time per region** (never forceable).

``preflight`` answers with the drill's ``ActionPlan`` (``regions.fleet.actionplan``): the
capacity before and during the fault (fleet-wide and per strict zone), the zones it strands,
and each refusal as a named unsafe reason. An admin may force past capacity
(``capacity_short``, ``zone_capacity_short``), residency (``residency_stranded``),
``region_down`` and ``failover_paused``; never past ``target_inactive``,
``no_active_endpoint`` or ``drill_under_way``. While the fault lasts, ``during`` repeats the
capacity checks (fleet-wide and per zone) and the residency check against the live state and
tells the runner to restore early when one fails (forced drills skip this).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from regions import hotstate
from regions.drills.spec import DrillSpec
from regions.fleet import snapshot
from regions.fleet.actionplan import (
    ActionPlan,
    CapacityChange,
    StrandedZone,
    Unsafe,
    UnsafeReason,
    stranded,
)
from regions.models import ACTIVE_DRILL_STATUSES, Drill
from trafficmgr.routing.failover import FleetEvaluation, evaluate_fleet, with_pauses
from trafficmgr.routing.residency import base_decision
from trafficmgr.routing.table import compile_table, zone_location, zone_of_country
from trafficmgr.routing.types import (
    AdminState,
    AllDown,
    Fleet,
    RegionState,
    ResidencyMode,
    RoutingTable,
)

SERVING = (RegionState.HEALTHY, RegionState.DEGRADED, RegionState.RECOVERING, RegionState.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Check:
    """The drill's plan, and the figures stored with the drill for ``during`` to re-check."""

    plan: ActionPlan
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def refusals(self) -> tuple[UnsafeReason, ...]:
        return self.plan.unsafe


def fault_fleet(fleet: Fleet, spec: DrillSpec) -> Fleet:
    """Return the fleet with the drill's endpoints drained: the engine's view of the fault."""
    touched = set(spec.endpoints)
    regions = tuple(
        replace(
            r,
            endpoints=tuple(
                replace(e, admin_state=AdminState.DRAINED) if e.name in touched else e
                for e in r.endpoints
            ),
        )
        for r in fleet.regions
    )
    return replace(fleet, regions=regions)


def _closed(fleet: Fleet) -> Fleet:
    """The fleet answering fail_closed: a list is empty exactly when no region is eligible."""
    return replace(fleet, failover=replace(fleet.failover, all_down=AllDown.FAIL_CLOSED))


def evaluate(fleet: Fleet, paused: frozenset[str], now: float) -> FleetEvaluation:
    store = hotstate.get()
    machines = with_pauses(store.machines(), paused, [r.name for r in fleet.regions], now)
    return evaluate_fleet(fleet, store.heartbeats(), machines, now)


def demand(evaluation: FleetEvaluation, regions: Collection[str] | None = None) -> float:
    """Return the decode tokens/s asked of the fleet (or of ``regions``) now: each serving
    region's capacity x its demand (the engine's demanded / live capacity; 1 - headroom where
    it gives none)."""
    total = 0.0
    for name, s in evaluation.statuses.items():
        if s.state in SERVING and (regions is None or name in regions):
            share = getattr(s, "demand", None)
            total += s.capacity * (1.0 - s.headroom if share is None else share)
    return total


def serving_capacity(evaluation: FleetEvaluation, regions: Collection[str] | None = None) -> float:
    return sum(
        s.capacity
        for name, s in evaluation.statuses.items()
        if s.state in SERVING and (regions is None or name in regions)
    )


def strict_zones(fleet: Fleet) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Return (rule, zones, regions) per strict rule: the regions the engine allows the rule's
    zones, zones allowed the same regions grouped (one group unless another rule narrows)."""
    out = []
    for rule in fleet.residency:
        if rule.mode is not ResidencyMode.STRICT:
            continue
        groups: dict[tuple[str, ...], list[str]] = {}
        for zone in [zone_of_country(c) for c in sorted(rule.countries)] + sorted(rule.continents):
            allowed = base_decision(fleet, zone_location(zone)).strict_regions or ()
            groups.setdefault(allowed, []).append(zone)
        out += [(rule.name, tuple(zones), regions) for regions, zones in groups.items() if regions]
    return out


def zone_capacity(
    spec: DrillSpec, fleet: Fleet, before: FleetEvaluation, during: FleetEvaluation, kept: float
) -> list[dict[str, Any]]:
    """Return each strict zone the drill touches: its regions, their demand now and the
    capacity they keep during the fault."""
    return [
        {
            "rule": rule,
            "zones": list(zones),
            "regions": list(regions),
            "demand_tokens_per_s": round(demand(before, regions), 1),
            "capacity_during_fault_tokens_per_s": round(
                serving_capacity(during, regions) + kept, 1
            ),
        }
        for rule, zones, regions in strict_zones(fleet)
        if spec.region in regions
    ]


def _zone_text(zone: Mapping[str, Any]) -> str:
    return (
        f"residency rule {zone['rule']} ({', '.join(zone['zones'])} → {', '.join(zone['regions'])})"
    )


def short_zones(zones: list[dict[str, Any]], margin: float) -> list[dict[str, Any]]:
    """Return the zones whose capacity left would not cover their demand plus ``margin``."""
    return [
        z
        for z in zones
        if z["demand_tokens_per_s"] > 0
        and z["capacity_during_fault_tokens_per_s"] < z["demand_tokens_per_s"] * (1.0 + margin)
    ]


def kept_capacity(spec: DrillSpec, before: FleetEvaluation) -> float:
    """Return what the touched endpoints still serve during the fault (throttled: a share)."""
    touched = sum(
        before.endpoints[name].capacity for name in spec.endpoints if name in before.endpoints
    )
    return spec.capacity_kept * touched


def strict_lists(table: RoutingTable, fleet: Fleet) -> set[tuple[str, str]]:
    """Return the (zone, model) lists of strict residency zones that have a region."""
    out = set()
    for rule in fleet.residency:
        if rule.mode is not ResidencyMode.STRICT:
            continue
        for zone in [zone_of_country(c) for c in rule.countries] + list(rule.continents):
            for model, entries in table.zones.get(zone, {}).items():
                if entries:
                    out.add((zone, model))
    return out


def _state_refusals(
    spec: DrillSpec, view: snapshot.FleetView, exclude: int | None
) -> list[UnsafeReason]:
    fleet = view.fleet
    region = fleet.region(spec.region)
    out: list[UnsafeReason] = []
    if region.admin_state is not AdminState.ACTIVE:
        out.append(
            UnsafeReason(
                Unsafe.TARGET_INACTIVE, f"region {region.name} is {region.admin_state.value}"
            )
        )
    for e in region.endpoints:
        if e.name == spec.target and e.admin_state is not AdminState.ACTIVE:
            out.append(
                UnsafeReason(Unsafe.TARGET_INACTIVE, f"endpoint {e.name} is {e.admin_state.value}")
            )
    if not spec.endpoints:
        out.append(
            UnsafeReason(Unsafe.NO_ACTIVE_ENDPOINT, f"region {region.name} has no active endpoint")
        )
    busy = [
        d.pk
        for d in Drill.objects.filter(status__in=ACTIVE_DRILL_STATUSES).exclude(pk=exclude)  # type: ignore[misc]
        if (d.params or {}).get("resolved", {}).get("region") == spec.region
    ]
    if busy:
        out.append(
            UnsafeReason(
                Unsafe.DRILL_UNDER_WAY,
                f"drill {busy[0]} is already under way in region {spec.region}",
            )
        )
    if spec.region in view.paused:
        out.append(
            UnsafeReason(
                Unsafe.FAILOVER_PAUSED,
                f"automatic failover is paused for {spec.region}: the drill would be real",
            )
        )
    machine = hotstate.get().machines().get(spec.region)
    if machine is not None and machine.state is RegionState.DOWN:
        out.append(UnsafeReason(Unsafe.REGION_DOWN, f"region {spec.region} is down already"))
    return out


def _capacity_refusals(
    fleet_capacity: CapacityChange, zones: list[dict[str, Any]], margin: float
) -> list[UnsafeReason]:
    """Return why the capacity left during the fault falls short, fleet-wide and per zone."""
    used, left = fleet_capacity.demand or 0.0, fleet_capacity.after
    out = []
    if left < used * (1.0 + margin):
        out.append(
            UnsafeReason(
                Unsafe.CAPACITY_SHORT,
                f"capacity left during the fault ({left:,.0f} tokens/s) would not cover the "
                f"demand ({used:,.0f} tokens/s) plus {margin:.0%} headroom",
            )
        )
    out += [
        UnsafeReason(
            Unsafe.ZONE_CAPACITY_SHORT,
            f"{_zone_text(z)}: capacity left in its regions during the fault "
            f"({z['capacity_during_fault_tokens_per_s']:,.0f} tokens/s) would not cover their "
            f"demand ({z['demand_tokens_per_s']:,.0f} tokens/s) plus {margin:.0%} headroom",
        )
        for z in short_zones(zones, margin)
    ]
    return out


def _residency(
    spec: DrillSpec,
    fleet: Fleet,
    before: FleetEvaluation,
    during: FleetEvaluation,
    at: float,
) -> tuple[tuple[StrandedZone, ...], set[tuple[str, str]]]:
    """Return the strict zones the fault strands, and the strict lists that keep a region."""
    table_now = compile_table(_closed(fleet), before.statuses, at)
    if spec.capacity_kept != 0:  # the endpoints still serve: no list loses them
        return (), strict_lists(table_now, fleet)
    table_fault = compile_table(_closed(fault_fleet(fleet, spec)), during.statuses, at)
    return stranded(fleet, table_now, table_fault), strict_lists(table_fault, fleet)


def preflight(
    spec: DrillSpec,
    view: snapshot.FleetView,
    now: float | None = None,
    exclude: int | None = None,
) -> Check:
    """Check a drill before it starts (``exclude``: the drill itself, when it re-checks)."""
    at = time.time() if now is None else now
    subject = f"drill {spec.kind} on {spec.target}"
    refusals = _state_refusals(spec, view, exclude)
    fleet = view.fleet
    if any(not r.forceable for r in refusals):
        return Check(ActionPlan(subject, unsafe=tuple(refusals)))
    before = evaluate(fleet, view.paused, at)
    during = (
        evaluate(fault_fleet(fleet, spec), view.paused, at) if spec.capacity_kept < 1 else before
    )
    margin = fleet.failover.spillover_headroom
    kept = kept_capacity(spec, before) if spec.capacity_kept < 1 else 0.0
    fleet_capacity = CapacityChange(
        "fleet", serving_capacity(before), serving_capacity(during) + kept, demand(before)
    )
    zones = zone_capacity(spec, fleet, before, during, kept)
    refusals += _capacity_refusals(fleet_capacity, zones, margin)
    lost, kept_lists = _residency(spec, fleet, before, during, at)
    refusals += [zone.unsafe() for zone in lost]
    plan = ActionPlan(
        subject,
        capacity=(
            fleet_capacity,
            *(
                CapacityChange(
                    _zone_text(z),
                    serving_capacity(before, z["regions"]),
                    z["capacity_during_fault_tokens_per_s"],
                    z["demand_tokens_per_s"],
                )
                for z in zones
            ),
        ),
        stranded=lost,
        unsafe=tuple(refusals),
    )
    figures = {
        "demand_tokens_per_s": round(fleet_capacity.demand or 0.0, 1),
        "capacity_tokens_per_s": round(fleet_capacity.before, 1),
        "capacity_during_fault_tokens_per_s": round(fleet_capacity.after, 1),
        "kept_tokens_per_s": round(kept, 1),
        "margin": margin,
        "residency_zones": zones,
        "stranded": [zone.as_dict() for zone in lost],
        "strict_lists": sorted(f"{z}/{m}" for z, m in kept_lists),
    }
    return Check(plan, figures)


def during(spec: DrillSpec, figures: Mapping[str, Any], now: float | None = None) -> list[str]:
    """Return why the fault must end now (capacity or residency lost meanwhile), if it must."""
    at = time.time() if now is None else now
    view = snapshot.current()
    fleet = view.fleet
    faulty = evaluate(fault_fleet(fleet, spec), view.paused, at)
    reasons = []
    used = float(figures.get("demand_tokens_per_s") or 0.0)
    margin = float(figures.get("margin") or 0.0)
    kept = float(figures.get("kept_tokens_per_s") or 0.0)
    left = serving_capacity(faulty) + kept
    if used > 0 and left < used * (1.0 + margin):
        reasons.append(
            f"capacity left ({left:,.0f} tokens/s) fell below the demand before the drill "
            f"({used:,.0f} tokens/s) plus {margin:.0%} headroom"
        )
    live = [
        {**z, "capacity_during_fault_tokens_per_s": serving_capacity(faulty, z["regions"]) + kept}
        for z in figures.get("residency_zones", [])
    ]
    reasons += [
        f"{_zone_text(z)}: capacity left in its regions "
        f"({z['capacity_during_fault_tokens_per_s']:,.0f} tokens/s) fell below their demand "
        f"before the drill ({z['demand_tokens_per_s']:,.0f} tokens/s) plus {margin:.0%} headroom"
        for z in short_zones(live, margin)
    ]
    if spec.capacity_kept == 0:
        table = compile_table(_closed(fault_fleet(fleet, spec)), faulty.statuses, at)
        have = strict_lists(table, fleet)
        lost = sorted(
            key for key in figures.get("strict_lists", []) if tuple(key.split("/", 1)) not in have
        )
        if lost:
            reasons.append(f"residency zone lists lost their last region: {', '.join(lost)}")
    return reasons
