"""What a change does to traffic, capacity and residency, and why the safety valve refuses it.

One plan type for every change an operator or automation asks of the fleet: an operator
action (drain, undrain, weight, pause; ``regions.loop.actions``), a fleet apply
(``regions.fleet.plan``) and a drill's fault (``regions.drills.guardrails``). Each computes
the effects with the engine (the routing table with and without the change, diffed by
``routing.table_diff``; ``routing.table.stranded_zones``) and fills an ``ActionPlan``: the
traffic that shifts per zone and model, the region states and serving capacity before and
after, the strict residency zones left with no region, and the named reasons the valve
refuses it.

Like octoDNS's ``Plan.raise_if_unsafe``: a plan with unsafe reasons raises ``UnsafePlan``
(``regions.errors``; a feature raises its own subclass for its error code) unless forced, and
force lifts only the reasons an admin may force: a drill on a drained region, or a second
drill in a region, is never forceable. Each surface renders the plan with the keys it has
always answered with (docs/architecture.md §4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from regions.errors import DomainError, UnsafePlan
from trafficmgr.routing.table import stranded_zones
from trafficmgr.routing.table_diff import ListChange, RegionChange
from trafficmgr.routing.types import Fleet, RoutingTable


class Unsafe(StrEnum):
    """Why the safety valve refuses a plan: one name per rule, stable for code and logs."""

    TRAFFIC_MOVED = "traffic_moved"  # an action moves too much of all traffic at once
    RESIDENCY_STRANDED = "residency_stranded"  # a strict zone would have no region left
    ENDPOINTS_DELETED = "endpoints_deleted"  # a fleet apply deletes too many endpoints
    CAPACITY_REMOVED = "capacity_removed"  # a fleet apply removes too much serving capacity
    CAPACITY_SHORT = "capacity_short"  # capacity left would not cover demand plus headroom
    ZONE_CAPACITY_SHORT = "zone_capacity_short"  # the same inside a strict residency zone
    FAILOVER_PAUSED = "failover_paused"  # a drill with failover paused is a real outage
    REGION_DOWN = "region_down"  # a drill on a region that is down already
    TARGET_INACTIVE = "target_inactive"  # a drill on a drained or disabled target
    NO_ACTIVE_ENDPOINT = "no_active_endpoint"  # a drill with nothing to take out
    DRILL_UNDER_WAY = "drill_under_way"  # a second drill in the same region


# Nothing to practise, or two faults at once: force does not make these meaningful.
NEVER_FORCEABLE = frozenset(
    {Unsafe.TARGET_INACTIVE, Unsafe.NO_ACTIVE_ENDPOINT, Unsafe.DRILL_UNDER_WAY}
)


@dataclass(frozen=True, slots=True)
class UnsafeReason:
    """One reason a plan is unsafe: its name and the sentence an operator reads."""

    code: Unsafe
    reason: str

    @property
    def forceable(self) -> bool:
        """Tell whether an admin may apply the plan past this reason."""
        return self.code not in NEVER_FORCEABLE

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "forceable": self.forceable}


@dataclass(frozen=True, slots=True)
class CapacityChange:
    """Serving capacity (decode tokens/s) of one scope before and after the change.

    The scope is a model, ``fleet``, or a residency rule's regions; ``demand`` is what that
    scope is asked for now, where the plan knows it.
    """

    scope: str
    before: float
    after: float
    demand: float | None = None

    @property
    def left_share(self) -> float | None:
        """Return the share of the capacity left (None: there was none)."""
        return self.after / self.before if self.before else None

    @property
    def removed_share(self) -> float:
        """Return the share of the capacity removed, 0 when it grows or there was none."""
        if self.before <= 0:
            return 0.0
        return max(0.0, self.before - self.after) / self.before


@dataclass(frozen=True, slots=True)
class StrandedZone:
    """A strict residency zone that has a region for a model now and would have none."""

    rule: str
    zone: str
    model: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "zone": self.zone, "model": self.model}

    def unsafe(self) -> UnsafeReason:
        return UnsafeReason(
            Unsafe.RESIDENCY_STRANDED,
            f"would leave residency zone {self.zone} (rule {self.rule}) with no region "
            f"for {self.model}",
        )


def stranded(fleet: Fleet, before: RoutingTable, after: RoutingTable) -> tuple[StrandedZone, ...]:
    """Return the strict zones the change strands; both tables compiled fail_closed."""
    return tuple(StrandedZone(**zone) for zone in stranded_zones(fleet, before, after))


@dataclass(frozen=True, slots=True)
class ActionPlan:
    """What one change does, and whether the safety valve lets it through."""

    subject: str  # the change in words: "drain region eu-west", "apply fleet example.net"
    traffic: tuple[ListChange, ...] = ()  # per zone and model: the weights before and after
    moved_share: float = 0.0  # of all traffic, as the planner weighs it
    states: tuple[RegionChange, ...] = ()  # region states before and after
    capacity: tuple[CapacityChange, ...] = ()
    stranded: tuple[StrandedZone, ...] = ()
    unsafe: tuple[UnsafeReason, ...] = ()

    @property
    def safe(self) -> bool:
        return not self.unsafe

    @property
    def forceable(self) -> bool:
        """Tell whether force would let an unsafe plan through (False when it is safe)."""
        return bool(self.unsafe) and all(r.forceable for r in self.unsafe)

    def reasons(self) -> list[str]:
        """Return every unsafe reason as its sentence."""
        return [r.reason for r in self.unsafe]

    def blocking(self, force: bool = False) -> tuple[UnsafeReason, ...]:
        """Return the reasons that still refuse the plan: all of them, or with ``force``
        the ones an admin may not force."""
        return tuple(r for r in self.unsafe if not (force and r.forceable))

    def forced(self, force: bool) -> bool:
        """Tell whether applying with ``force`` goes past at least one unsafe reason."""
        return force and any(r.forceable for r in self.unsafe)

    def raise_if_unsafe(
        self,
        force: bool = False,
        *,
        error: type[UnsafePlan] = UnsafePlan,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Refuse the plan with ``error`` (naming every blocking reason) unless it may pass."""
        blocking = self.blocking(force)
        if blocking:
            raise error.refusing([(r.code.value, r.reason) for r in blocking], extra=extra)


def check_may_force(force: bool, may_force: bool, what: str) -> None:
    """Refuse ``force`` from anyone but an admin (403), whether or not the plan needs it."""
    if force and not may_force:
        raise DomainError(
            f"only an admin may force {what}", code="permission_denied", status_code=403
        )
