"""Fleet apply: diff the stored configuration against a desired Fleet, then apply the plan.

Like octoDNS or terraform: ``plan_fleet`` lists per object what would be created,
updated (which fields, old → new) or deleted; ``apply_plan`` writes it in one
transaction. A plan that deletes too many endpoints or removes too much serving
capacity is refused unless forced (octoDNS's safety valve): ``FleetPlan.action_plan`` is
the plan in the form every change shares (``regions.fleet.actionplan``), with the named
reasons ``endpoints_deleted`` and ``capacity_removed``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from regions.audit.trail import current_actor, record
from regions.errors import DomainError, UnsafePlan
from regions.fleet.actionplan import ActionPlan, CapacityChange, Unsafe, UnsafeReason
from regions.fleet.changes import Change
from regions.fleet.services import DEFAULT_POLICY, fleet_snapshot
from regions.fleet.writer import write_changes
from regions.models import Event, EventKind, FailoverPolicy, FleetSettings
from trafficmgr.fleetfile import FleetError, FleetIssue, failover_to_dict
from trafficmgr.fleetfile.read import NO_CLIENTS
from trafficmgr.fleetfile.write import slo_doc
from trafficmgr.routing import types as t

MAX_ENDPOINT_DELETE_FRACTION = 0.30
MAX_CAPACITY_REMOVE_FRACTION = 0.50

# Object types in the order a plan lists them.
TYPES = ("fleet_settings", "gpu_profile", "region", "endpoint", "residency_rule", "failover_policy")
ACTIONS = ("create", "update", "delete")
_SYMBOL = {"create": "+", "update": "~", "delete": "-"}

State = dict[str, dict[str, dict[str, Any]]]


class StalePlan(DomainError):
    """The stored fleet changed between planning and applying."""

    code = "stale_plan"


@dataclass(frozen=True)
class Safety:
    """The figures the safety valve judges a plan by."""

    endpoints_before: int
    endpoints_deleted: int
    capacity_before: float
    capacity_after: float

    @property
    def endpoint_fraction(self) -> float:
        return self.endpoints_deleted / self.endpoints_before if self.endpoints_before else 0.0

    @property
    def capacity(self) -> CapacityChange:
        return CapacityChange("fleet", self.capacity_before, self.capacity_after)

    @property
    def capacity_fraction(self) -> float:
        return self.capacity.removed_share

    def unsafe(self) -> tuple[UnsafeReason, ...]:
        """Why the valve refuses this plan, by name; empty when it is safe."""
        out = []
        if self.endpoint_fraction > MAX_ENDPOINT_DELETE_FRACTION:
            out.append(
                UnsafeReason(
                    Unsafe.ENDPOINTS_DELETED,
                    f"deletes {self.endpoints_deleted} of {self.endpoints_before} endpoints "
                    f"({self.endpoint_fraction:.0%}, limit "
                    f"{MAX_ENDPOINT_DELETE_FRACTION:.0%})",
                )
            )
        if self.capacity_fraction > MAX_CAPACITY_REMOVE_FRACTION:
            out.append(
                UnsafeReason(
                    Unsafe.CAPACITY_REMOVED,
                    f"removes {self.capacity_fraction:.0%} of serving capacity "
                    f"({self.capacity_before:,.0f} -> {self.capacity_after:,.0f} decode "
                    f"tokens/s, limit {MAX_CAPACITY_REMOVE_FRACTION:.0%})",
                )
            )
        return tuple(out)

    def reasons(self) -> list[str]:
        """Why the valve refuses this plan, as sentences; empty when it is safe."""
        return [r.reason for r in self.unsafe()]

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoints_before": self.endpoints_before,
            "endpoints_deleted": self.endpoints_deleted,
            "capacity_before": self.capacity_before,
            "capacity_after": self.capacity_after,
            "unsafe": self.reasons(),
        }


@dataclass(frozen=True)
class FleetPlan:
    desired: t.Fleet
    changes: tuple[Change, ...]
    safety: Safety = field(compare=False)

    @property
    def empty(self) -> bool:
        return not self.changes

    def counts(self) -> dict[str, int]:
        return {a: sum(1 for c in self.changes if c.action == a) for a in ACTIONS}

    def summary(self) -> str:
        if self.empty:
            return "no changes"
        n = self.counts()
        return f"{n['create']} to create, {n['update']} to update, {n['delete']} to delete"

    def render(self) -> str:
        """The plan as text, one block per object, like octoDNS or terraform."""
        if self.empty:
            return "Fleet plan: no changes; the stored fleet matches the file.\n"
        lines = [f"Fleet plan: {self.summary()}"]
        for change in self.changes:
            lines.append(f"  {_SYMBOL[change.action]} {change.type} {change.name}")
            for key, (old, new) in change.fields.items():
                if change.action == "create":
                    lines.append(f"      {key}: {_show(new)}")
                elif change.action == "update":
                    lines.append(f"      {key}: {_show(old)} -> {_show(new)}")
        s = self.safety
        if s.endpoints_deleted or s.capacity_after < s.capacity_before:
            lines.append(
                f"Safety: deletes {s.endpoints_deleted} of {s.endpoints_before} "
                f"endpoints ({s.endpoint_fraction:.0%}); serving capacity "
                f"{s.capacity_before:,.0f} -> {s.capacity_after:,.0f} decode tokens/s "
                f"(-{s.capacity_fraction:.0%})"
            )
        for reason in s.reasons():
            lines.append(f"UNSAFE: plan {reason}; apply with force to proceed")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {
            "changes": [c.as_dict() for c in self.changes],
            "summary": self.summary(),
            "counts": self.counts(),
            "safety": self.safety.as_dict(),
        }

    def action_plan(self) -> ActionPlan:
        """The plan as every change states it: capacity before and after, unsafe reasons."""
        return ActionPlan(
            subject=f"apply fleet {self.desired.zone}: {self.summary()}",
            capacity=(self.safety.capacity,),
            unsafe=self.safety.unsafe(),
        )

    def raise_if_unsafe(self, force: bool = False) -> None:
        """Refuse (``UnsafePlan``, with the safety figures) unless safe or forced."""
        self.action_plan().raise_if_unsafe(
            force, error=UnsafePlan, extra={"safety": self.safety.as_dict()}
        )


def _show(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return json.dumps(value, ensure_ascii=False)


# --- planning --------------------------------------------------------------------------


def fleet_state(fleet: t.Fleet) -> State:
    """Each object of a Fleet as its comparable fields, keyed by type and name."""
    f = fleet.failover
    return {
        "fleet_settings": {
            "fleet": {
                "zone": fleet.zone,
                "ttl": fleet.ttl,
                "clients": [{"country": c.country, "share": c.share} for c in fleet.clients],
                "slo": slo_doc(fleet.slo),
                "unlocated_clients": str(fleet.unlocated),
            }
        },
        "gpu_profile": {
            p.name: {
                "prefill_tokens_per_s": p.prefill_tokens_per_s,
                "decode_tokens_per_s": p.decode_tokens_per_s,
                "max_concurrency": p.max_concurrency,
            }
            for p in fleet.gpu_profiles.values()
        },
        "region": {
            r.name: {
                "country": r.country,
                "lat": r.location.lat,
                "lon": r.location.lon,
                "addresses": list(r.addresses),
                "priority": r.priority,
                "weight": r.weight,
                "state": r.admin_state.value,
            }
            for r in fleet.regions
        },
        "endpoint": {
            e.name: {
                "region": e.region,
                "address": e.address,
                "gpu": e.gpu,
                "gpus": e.gpus,
                "models": list(e.models),
                "weight": e.weight,
                "state": e.admin_state.value,
            }
            for e in fleet.endpoints()
        },
        "residency_rule": {
            r.name: {
                "countries": sorted(r.listed_countries()),
                "continents": sorted(r.continents),
                "sets": sorted(r.sets),
                "regions": sorted(r.regions),
                "mode": r.mode.value,
            }
            for r in fleet.residency
        },
        "failover_policy": {DEFAULT_POLICY: failover_to_dict(f)},
    }


def serving_capacity(fleet: t.Fleet) -> float:
    """Decode tokens/s of active endpoints in active regions (rate × GPUs)."""
    total = 0.0
    for region in fleet.regions:
        if region.admin_state is not t.AdminState.ACTIVE:
            continue
        for e in region.endpoints:
            profile = fleet.gpu_profiles.get(e.gpu)
            if profile is not None and e.admin_state is t.AdminState.ACTIVE:
                total += profile.decode_tokens_per_s * e.gpus
    return total


def check_consistent(fleet: t.Fleet) -> None:
    """Refuse a Fleet whose references dangle (names the fleet-file path of each)."""
    issues: list[FleetIssue] = []
    names = [r.name for r in fleet.regions]
    endpoints = [e.name for e in fleet.endpoints()]
    for label, seen in (("region", names), ("endpoint", endpoints)):
        for dup in sorted({n for n in seen if seen.count(n) > 1}):
            issues.append(FleetIssue("regions", f"duplicate {label} name {dup!r}"))
    for i, region in enumerate(fleet.regions):
        for j, e in enumerate(region.endpoints):
            if e.gpu not in fleet.gpu_profiles:
                issues.append(
                    FleetIssue(f"regions[{i}].endpoints[{j}].gpu", f"unknown GPU profile {e.gpu!r}")
                )
    for i, rule in enumerate(fleet.residency):
        if not rule.countries and not rule.continents:
            issues.append(FleetIssue(f"residency[{i}].clients", NO_CLIENTS))
        if not rule.regions:
            issues.append(
                FleetIssue(
                    f"residency[{i}].regions", "a residency rule must allow at least one region"
                )
            )
        for k, name in enumerate(rule.regions):
            if name not in names:
                issues.append(
                    FleetIssue(f"residency[{i}].regions[{k}]", f"unknown region {name!r}")
                )
    if issues:
        raise FleetError(issues)


def _stored_state() -> tuple[State, t.Fleet]:
    current = fleet_snapshot()
    state = fleet_state(current)
    if not FleetSettings.objects.filter(pk=1).exists():
        state["fleet_settings"] = {}
    if not FailoverPolicy.objects.filter(name=DEFAULT_POLICY).exists():
        state["failover_policy"] = {}
    return state, current


def diff_states(current: State, desired: State) -> tuple[Change, ...]:
    """Per object: create, update (changed fields only) or delete."""
    changes: list[Change] = []
    for kind in TYPES:
        old_objects, new_objects = current.get(kind, {}), desired.get(kind, {})
        for name in sorted(set(old_objects) | set(new_objects)):
            old, new = old_objects.get(name), new_objects.get(name)
            if old is None and new is not None:
                changes.append(Change("create", kind, name, {k: (None, v) for k, v in new.items()}))
            elif new is None and old is not None:
                changes.append(Change("delete", kind, name, {k: (v, None) for k, v in old.items()}))
            elif old is not None and new is not None and old != new:
                changed = {k: (old.get(k), v) for k, v in new.items() if old.get(k) != v}
                changes.append(Change("update", kind, name, changed))
    return tuple(changes)


def plan_fleet(desired: t.Fleet) -> FleetPlan:
    """Diff the stored fleet against ``desired``; nothing is written."""
    check_consistent(desired)
    state, current = _stored_state()
    changes = diff_states(state, fleet_state(desired))
    deleted = sum(1 for c in changes if c.type == "endpoint" and c.action == "delete")
    safety = Safety(
        endpoints_before=len(state["endpoint"]),
        endpoints_deleted=deleted,
        capacity_before=serving_capacity(current),
        capacity_after=serving_capacity(desired),
    )
    return FleetPlan(desired=desired, changes=changes, safety=safety)


# --- applying --------------------------------------------------------------------------


def apply_plan(plan: FleetPlan, force: bool = False) -> FleetPlan:
    """Apply a plan in one transaction; refuse an unsafe plan unless ``force``.

    The plan is made again inside the transaction; if the stored fleet changed since
    ``plan`` was made, nothing is written (StalePlan). Returns the applied plan.
    """
    with transaction.atomic():
        # Serialises concurrent applies on databases with row locks.
        list(FleetSettings.objects.select_for_update().filter(pk=1))
        fresh = plan_fleet(plan.desired)
        if fresh.changes != plan.changes:
            raise StalePlan("the stored fleet changed since this plan was made; plan again")
        fresh.raise_if_unsafe(force)
        if fresh.empty:
            return fresh
        write_changes(fresh.desired, fresh.changes)
        _report(fresh, force)
    return fresh


def _report(plan: FleetPlan, force: bool) -> None:
    """Leave one audit row and one config event summarising the apply."""
    objects = [f"{c.action} {c.type} {c.name}" for c in plan.changes]
    record(
        "apply",
        "Fleet",
        "",
        plan.desired.zone,
        before={"endpoints": plan.safety.endpoints_before, "capacity": plan.safety.capacity_before},
        after={
            "summary": plan.summary(),
            "changes": [c.as_dict() for c in plan.changes],
            "capacity": plan.safety.capacity_after,
            "forced": force,
        },
    )
    Event.objects.create(
        at=timezone.now(),
        kind=EventKind.CONFIG,
        severity="warning" if force and plan.safety.reasons() else "info",
        message=f"fleet applied by {current_actor().name}: {plan.summary()}",
        data={
            "counts": plan.counts(),
            "objects": objects[:500],
            "forced": force,
            "safety": plan.safety.as_dict(),
        },
    )
