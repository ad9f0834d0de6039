"""Operator actions (drain, undrain, weight, pause/resume failover): plan first, then apply.

The plan (an ``ActionPlan``, ``regions.fleet.actionplan``) compiles the routing table through
the engine with and without the action, from the same heartbeats and machines, and holds the
traffic that moves per zone and model, the capacity left per model and the residency effect.
It is the table the next tick would publish, before the shift limit and slow start smooth it.

The safety valve (octoDNS's ``raise_if_unsafe``) refuses an action that moves more than
``MAX_MOVED`` of all traffic (``traffic_moved``), or leaves a strict residency zone with no
eligible region (``residency_stranded``), unless an admin forces it. "All traffic" weighs
each client country by its share in the fleet's ``clients`` (every zone alike when there are
none) and each model alike.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from regions import hotstate
from regions.audit.trail import current_actor
from regions.errors import DomainError, UnsafePlan
from regions.fleet import snapshot
from regions.fleet.actionplan import (
    ActionPlan,
    CapacityChange,
    Unsafe,
    UnsafeReason,
    check_may_force,
    stranded,
)
from regions.loop import tasks
from regions.models import AdminState as AdminStateRow
from regions.models import Endpoint as EndpointRow
from regions.models import Event, EventKind
from regions.models import Region as RegionRow
from trafficmgr.routing.failover import evaluate_fleet, with_pauses
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.table import compile_table, diff_tables, zone_keys
from trafficmgr.routing.types import AdminState, AllDown, Fleet, RoutingTable, WeightedRegion

log = logging.getLogger(__name__)

MAX_MOVED = 0.5
ACTIONS = ("drain", "undrain", "weight", "pause-failover", "resume-failover")
NOTE = "the next tick publishes this gradually: shift limit per tick, slow start"


class UnsafeChange(UnsafePlan):
    """An operator action the safety valve refuses (409 ``unsafe_change``, with its plan)."""

    code = "unsafe_change"
    refusal = "refused: {reasons}; add ?force=1 (admin) to apply anyway"


@dataclass(frozen=True, slots=True)
class OperatorAction:
    """What an operator asks: a verb of ``ACTIONS`` on a region or an endpoint."""

    verb: str  # one of ACTIONS
    kind: str  # region | endpoint
    target: str
    weight: float | None = None

    def describe(self) -> str:
        extra = f" to {self.weight:g}" if self.weight is not None else ""
        return f"{self.verb} {self.kind} {self.target}{extra}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.verb,
            "kind": self.kind,
            "target": self.target,
            **({"weight": self.weight} if self.weight is not None else {}),
        }


def changed_fleet(fleet: Fleet, action: OperatorAction) -> Fleet:
    """Return the fleet as it would be after the action (pauses do not change it)."""
    regions = []
    for r in fleet.regions:
        if action.kind == "region" and r.name == action.target:
            if action.verb == "drain":
                r = replace(r, admin_state=AdminState.DRAINED)
            elif action.verb == "undrain":
                r = replace(r, admin_state=AdminState.ACTIVE)
            elif action.verb == "weight" and action.weight is not None:
                r = replace(r, weight=action.weight)
        elif action.kind == "endpoint" and action.verb in ("drain", "undrain"):
            state = AdminState.DRAINED if action.verb == "drain" else AdminState.ACTIVE
            r = replace(
                r,
                endpoints=tuple(
                    replace(e, admin_state=state) if e.name == action.target else e
                    for e in r.endpoints
                ),
            )
        regions.append(r)
    return replace(fleet, regions=tuple(regions))


def _compile(
    fleet: Fleet, paused: frozenset[str], now: float, closed: bool = False
) -> RoutingTable:
    store = hotstate.get()
    if closed:  # fail_closed lists are empty exactly when no region is eligible
        fleet = replace(fleet, failover=replace(fleet.failover, all_down=AllDown.FAIL_CLOSED))
    machines = with_pauses(store.machines(), paused, [r.name for r in fleet.regions], now)
    evaluation = evaluate_fleet(fleet, store.heartbeats(), machines, now)
    return compile_table(fleet, evaluation.statuses, now)


def _entries(entries: tuple[WeightedRegion, ...]) -> list[dict[str, Any]]:
    return [{"region": w.region, "weight": w.weight} for w in entries]


def _client_zone(table: RoutingTable, country: str) -> str | None:
    for key in zone_keys(country_location(country)):
        if key in table.zones:
            return key
    return None


def moved_share(fleet: Fleet, before: RoutingTable, moved: dict[tuple[str, str], float]) -> float:
    """Return the share of all traffic that moves (see the module docstring)."""
    models = fleet.models()
    if not models:
        return 0.0
    if fleet.clients:
        total = sum(c.share for c in fleet.clients) or 1.0
        share = 0.0
        for c in fleet.clients:
            zone = _client_zone(before, c.country)
            if zone is not None:
                share += c.share * sum(moved.get((zone, m), 0.0) for m in models) / len(models)
        return share / total
    lists = [(z, m) for z, ls in before.zones.items() for m in ls]
    return sum(moved.get(k, 0.0) for k in lists) / max(1, len(lists))


def capacity(table: RoutingTable) -> dict[str, float]:
    out: dict[str, float] = {}
    for status in table.regions.values():
        for model, cap in status.models.items():
            out[model] = out.get(model, 0.0) + cap
    return out


def make_plan(action: OperatorAction, now: float | None = None) -> ActionPlan:
    """Plan an action: what moves, what capacity is left, what residency loses."""
    at = time.time() if now is None else now
    view = snapshot.load()
    _check_target(view.fleet, action)
    fleet_after = changed_fleet(view.fleet, action)
    paused_after = set(view.paused)
    if action.verb == "pause-failover":
        paused_after.add(action.target)
    elif action.verb == "resume-failover":
        paused_after.discard(action.target)
    before = _compile(view.fleet, view.paused, at)
    after = _compile(fleet_after, frozenset(paused_after), at)
    diff = diff_tables(before, after)
    share = moved_share(view.fleet, before, {(c.zone, c.model): c.moved for c in diff.lists})
    lost = stranded(
        view.fleet,
        _compile(view.fleet, view.paused, at, closed=True),
        _compile(fleet_after, frozenset(paused_after), at, closed=True),
    )
    unsafe = []
    if share > MAX_MOVED:
        unsafe.append(
            UnsafeReason(
                Unsafe.TRAFFIC_MOVED,
                f"moves {share:.0%} of all traffic (more than {MAX_MOVED:.0%})",
            )
        )
    unsafe += [zone.unsafe() for zone in lost]
    cap_before, cap_after = capacity(before), capacity(after)
    return ActionPlan(
        subject=action.describe(),
        traffic=diff.lists,
        moved_share=share,
        states=diff.regions,
        capacity=tuple(
            CapacityChange(m, cap_before.get(m, 0.0), cap_after.get(m, 0.0))
            for m in sorted(cap_before.keys() | cap_after.keys())
        ),
        stranded=lost,
        unsafe=tuple(unsafe),
    )


def plan_body(action: OperatorAction, plan: ActionPlan) -> dict[str, Any]:
    """Return the plan as the actions API answers it (``plan`` of every action response)."""
    return {
        "change": action.as_dict(),
        "moved_share": round(plan.moved_share, 4),
        "moves": [
            {
                "zone": c.zone,
                "model": c.model,
                "moved": round(c.moved, 4),
                "before": _entries(c.old),
                "after": _entries(c.new),
            }
            for c in plan.traffic
        ],
        "regions": [
            {
                "region": c.region,
                "before": c.old.value if c.old else None,
                "after": c.new.value if c.new else None,
            }
            for c in plan.states
        ],
        "capacity": {
            c.scope: {
                "before": c.before,
                "after": c.after,
                "left_share": None if c.left_share is None else round(c.left_share, 4),
            }
            for c in plan.capacity
        },
        "residency": {"stranded": [s.as_dict() for s in plan.stranded], "ok": not plan.stranded},
        "safe": plan.safe,
        "refusals": plan.reasons(),
        "note": NOTE,
    }


def _check_target(fleet: Fleet, action: OperatorAction) -> None:
    if action.kind == "region":
        names = {r.name for r in fleet.regions}
    else:
        names = {e.name for e in fleet.endpoints()}
    if action.target not in names:
        raise DomainError(
            f"unknown {action.kind} {action.target!r}", code="not_found", status_code=404
        )


def perform(
    action: OperatorAction, *, dry_run: bool, force: bool, may_force: bool
) -> dict[str, Any]:
    """Plan the action and, unless a dry run, apply it through the safety valve."""
    plan = make_plan(action)
    body = plan_body(action, plan)
    if dry_run:
        return {"applied": False, "dry_run": True, "plan": body}
    check_may_force(force, may_force, "an unsafe change")
    plan.raise_if_unsafe(force, error=UnsafeChange, extra={"plan": body})
    changed = apply(action, plan, forced=plan.forced(force))
    return {"applied": changed, "dry_run": False, "plan": body}


def apply(action: OperatorAction, plan: ActionPlan, forced: bool) -> bool:
    """Write the action (audited by the model signals) and its Event; tick once committed."""
    with transaction.atomic():
        row: RegionRow | EndpointRow
        if action.kind == "region":
            row = RegionRow.objects.select_for_update().get(name=action.target)
        else:
            row = EndpointRow.objects.select_for_update().get(name=action.target)
        fields = _set(row, action)
        if not fields:
            return False
        row.save(update_fields=[*fields, "updated_at"])
        actor = current_actor()
        region = row.name if isinstance(row, RegionRow) else row.region.name
        Event.objects.create(
            at=timezone.now(),
            kind=EventKind.ACTION,
            severity="warning" if forced else "info",
            region=region,
            endpoint=row.name if isinstance(row, EndpointRow) else "",
            message=f"{actor.name}: {action.describe()}"
            f"{' (forced past the safety valve)' if forced else ''}; "
            f"{round(plan.moved_share, 4):.0%} of traffic moves",
            data={
                "plan": {
                    "change": action.as_dict(),
                    "moved_share": round(plan.moved_share, 4),
                    "refusals": plan.reasons(),
                },
                "actor": actor.name,
                "forced": forced,
            },
        )
    transaction.on_commit(_tick_soon)
    return True


def _set(row: RegionRow | EndpointRow, action: OperatorAction) -> list[str]:
    """Set the fields the action touches; return their names (empty: nothing to do)."""
    if action.verb in ("drain", "undrain"):
        if row.admin_state == AdminStateRow.DISABLED:
            raise DomainError(
                f"{action.kind} {row.name} is disabled; an admin changes that "
                "through the configuration API",
                code="conflict",
            )
        state = AdminStateRow.DRAINED if action.verb == "drain" else AdminStateRow.ACTIVE
        if row.admin_state == state:
            return []
        row.admin_state = state
        return ["admin_state"]
    if action.verb == "weight" and isinstance(row, RegionRow):
        if row.weight == action.weight:
            return []
        row.weight = float(action.weight or 0.0)
        return ["weight"]
    if isinstance(row, RegionRow):
        paused = action.verb == "pause-failover"
        if row.failover_paused == paused:
            return []
        row.failover_paused = paused
        return ["failover_paused"]
    raise DomainError(
        f"{action.verb} does not apply to an endpoint", code="invalid", status_code=400
    )


def _tick_soon() -> None:
    """Let the action reach the table now rather than at the next beat."""
    try:
        tasks.tick.apply_async(expires=30)
    except Exception:  # the next beat picks the action up anyway
        log.warning("could not queue a tick after an operator action", exc_info=True)
