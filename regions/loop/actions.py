"""Operator actions (drain, undrain, weight, pause/resume failover): plan first, then apply.

The plan compiles the routing table through the engine with and without the change, from
the same heartbeats and machines, and reports the traffic that moves per zone and model,
the capacity left per model and the residency effect. It is the table the next tick would
publish, before the shift limit and slow start smooth it.

The safety valve (octoDNS's ``raise_if_unsafe``) refuses a change that moves more than
``MAX_MOVED`` of all traffic, or leaves a strict residency zone with no eligible region,
unless an admin forces it. "All traffic" weighs each client country by its share in the
fleet's ``clients`` (every zone alike when there are none) and each model alike.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from regions import hotstate
from regions.audit.trail import current_actor
from regions.errors import DomainError
from regions.fleet import snapshot
from regions.loop import tasks
from regions.models import AdminState as AdminStateRow
from regions.models import Endpoint as EndpointRow
from regions.models import Event, EventKind
from regions.models import Region as RegionRow
from trafficmgr.routing.failover import evaluate_fleet, with_pauses
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.table import (
    compile_table,
    diff_tables,
    stranded_zones,
    zone_keys,
)
from trafficmgr.routing.types import (
    AdminState,
    AllDown,
    Fleet,
    RoutingTable,
    WeightedRegion,
)

log = logging.getLogger(__name__)

MAX_MOVED = 0.5
ACTIONS = ("drain", "undrain", "weight", "pause-failover", "resume-failover")


@dataclass(frozen=True, slots=True)
class Change:
    action: str  # one of ACTIONS
    kind: str  # region | endpoint
    target: str
    weight: float | None = None

    def describe(self) -> str:
        extra = f" to {self.weight:g}" if self.weight is not None else ""
        return f"{self.action} {self.kind} {self.target}{extra}"


def changed_fleet(fleet: Fleet, change: Change) -> Fleet:
    """Return the fleet as it would be after the change (pauses do not change it)."""
    regions = []
    for r in fleet.regions:
        if change.kind == "region" and r.name == change.target:
            if change.action == "drain":
                r = replace(r, admin_state=AdminState.DRAINED)
            elif change.action == "undrain":
                r = replace(r, admin_state=AdminState.ACTIVE)
            elif change.action == "weight" and change.weight is not None:
                r = replace(r, weight=change.weight)
        elif change.kind == "endpoint" and change.action in ("drain", "undrain"):
            state = AdminState.DRAINED if change.action == "drain" else AdminState.ACTIVE
            r = replace(
                r,
                endpoints=tuple(
                    replace(e, admin_state=state) if e.name == change.target else e
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


def make_plan(change: Change, now: float | None = None) -> dict[str, Any]:
    """Plan a change: what moves, what capacity is left, what residency loses."""
    at = time.time() if now is None else now
    view = snapshot.load()
    _check_target(view.fleet, change)
    fleet_after = changed_fleet(view.fleet, change)
    paused_after = set(view.paused)
    if change.action == "pause-failover":
        paused_after.add(change.target)
    elif change.action == "resume-failover":
        paused_after.discard(change.target)
    before = _compile(view.fleet, view.paused, at)
    after = _compile(fleet_after, frozenset(paused_after), at)
    diff = diff_tables(before, after)
    moved = {(c.zone, c.model): c.moved for c in diff.lists}
    share = moved_share(view.fleet, before, moved)
    stranded = stranded_zones(
        view.fleet,
        _compile(view.fleet, view.paused, at, closed=True),
        _compile(fleet_after, frozenset(paused_after), at, closed=True),
    )
    cap_before, cap_after = capacity(before), capacity(after)
    refusals = []
    if share > MAX_MOVED:
        refusals.append(f"moves {share:.0%} of all traffic (more than {MAX_MOVED:.0%})")
    refusals += [
        f"leaves zone {s['zone']} (rule {s['rule']}) with no region for {s['model']}"
        for s in stranded
    ]
    return {
        "change": {
            "action": change.action,
            "kind": change.kind,
            "target": change.target,
            **({"weight": change.weight} if change.weight is not None else {}),
        },
        "moved_share": round(share, 4),
        "moves": [
            {
                "zone": c.zone,
                "model": c.model,
                "moved": round(c.moved, 4),
                "before": _entries(c.old),
                "after": _entries(c.new),
            }
            for c in diff.lists
        ],
        "regions": [
            {
                "region": c.region,
                "before": c.old.value if c.old else None,
                "after": c.new.value if c.new else None,
            }
            for c in diff.regions
        ],
        "capacity": {
            m: {
                "before": cap_before.get(m, 0.0),
                "after": cap_after.get(m, 0.0),
                "left_share": round(cap_after.get(m, 0.0) / cap_before[m], 4)
                if cap_before.get(m)
                else None,
            }
            for m in sorted(cap_before.keys() | cap_after.keys())
        },
        "residency": {"stranded": stranded, "ok": not stranded},
        "safe": not refusals,
        "refusals": refusals,
        "note": "the next tick publishes this gradually: shift limit per tick, slow start",
    }


def _check_target(fleet: Fleet, change: Change) -> None:
    if change.kind == "region":
        names = {r.name for r in fleet.regions}
    else:
        names = {e.name for e in fleet.endpoints()}
    if change.target not in names:
        raise DomainError(
            f"unknown {change.kind} {change.target!r}", code="not_found", status_code=404
        )


def perform(change: Change, *, dry_run: bool, force: bool, may_force: bool) -> dict[str, Any]:
    """Plan the change and, unless a dry run, apply it through the safety valve."""
    plan = make_plan(change)
    if dry_run:
        return {"applied": False, "dry_run": True, "plan": plan}
    if force and not may_force:
        raise DomainError(
            "only an admin may force an unsafe change", code="permission_denied", status_code=403
        )
    if plan["refusals"] and not force:
        raise DomainError(
            f"refused: {'; '.join(plan['refusals'])}; add ?force=1 (admin) to apply anyway",
            code="unsafe_change",
            extra={"plan": plan},
        )
    changed = apply(change, plan, forced=bool(force and plan["refusals"]))
    return {"applied": changed, "dry_run": False, "plan": plan}


def apply(change: Change, plan: dict[str, Any], forced: bool) -> bool:
    """Write the change (audited by the model signals) and its Event; tick once committed."""
    with transaction.atomic():
        row: RegionRow | EndpointRow
        if change.kind == "region":
            row = RegionRow.objects.select_for_update().get(name=change.target)
        else:
            row = EndpointRow.objects.select_for_update().get(name=change.target)
        fields = _set(row, change)
        if not fields:
            return False
        row.save(update_fields=[*fields, "updated_at"])
        actor = current_actor()
        region = row.name if isinstance(row, RegionRow) else row.region.name
        Event.objects.create(
            at=_now(),
            kind=EventKind.ACTION,
            severity="warning" if forced else "info",
            region=region,
            endpoint=row.name if isinstance(row, EndpointRow) else "",
            message=f"{actor.name}: {change.describe()}"
            f"{' (forced past the safety valve)' if forced else ''}; "
            f"{plan['moved_share']:.0%} of traffic moves",
            data={
                "plan": {k: plan[k] for k in ("change", "moved_share", "refusals")},
                "actor": actor.name,
                "forced": forced,
            },
        )
    transaction.on_commit(_tick_soon)
    return True


def _set(row: RegionRow | EndpointRow, change: Change) -> list[str]:
    """Set the fields the change touches; return their names (empty: nothing to do)."""
    if change.action in ("drain", "undrain"):
        if row.admin_state == AdminStateRow.DISABLED:
            raise DomainError(
                f"{change.kind} {row.name} is disabled; an admin changes that "
                "through the configuration API",
                code="conflict",
            )
        state = AdminStateRow.DRAINED if change.action == "drain" else AdminStateRow.ACTIVE
        if row.admin_state == state:
            return []
        row.admin_state = state
        return ["admin_state"]
    if change.action == "weight" and isinstance(row, RegionRow):
        if row.weight == change.weight:
            return []
        row.weight = float(change.weight or 0.0)
        return ["weight"]
    if isinstance(row, RegionRow):
        paused = change.action == "pause-failover"
        if row.failover_paused == paused:
            return []
        row.failover_paused = paused
        return ["failover_paused"]
    raise DomainError(
        f"{change.action} does not apply to an endpoint", code="invalid", status_code=400
    )


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


def _tick_soon() -> None:
    """Let the change reach the table now rather than at the next beat."""
    try:
        tasks.tick.apply_async(expires=30)
    except Exception:  # the next beat picks the change up anyway
        log.warning("could not queue a tick after an operator action", exc_info=True)
