"""What every publisher target does: plan (desired vs current), check, apply, count.

A target is one place records live: an RFC 2136 server's zone (one view of it), or a
PowerDNS zone managed over its HTTP API. Subclasses say how the desired records are built,
how the current ones are read and how a plan is written; this class keeps the order
(plan → safety valve → apply) and the bookkeeping (result, counters, error target) the same.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from trafficmgr.dns.publishers.errors import PublishError
from trafficmgr.dns.publishers.plan import ChangeKind, Plan, make_plan
from trafficmgr.dns.publishers.records import DnsZone, RecordSets
from trafficmgr.dns.publishers.results import TOTALS, Counters, PublishResult
from trafficmgr.dns.publishers.retry import Attempts
from trafficmgr.routing.types import RoutingTable

log = logging.getLogger("trafficmgr.dns.publishers")


class Target(ABC):
    """One external DNS zone the routing table is published into."""

    kind: ClassVar[str]

    def __init__(self, zone: DnsZone, name: str) -> None:
        self.zone = zone
        self.name = name
        self.metrics = Counters(TOTALS)

    @abstractmethod
    def desired(self, table: RoutingTable) -> RecordSets:
        """Return the record sets this target should hold for ``table``."""

    @abstractmethod
    def read_current(self, desired: RecordSets, attempts: Attempts) -> tuple[str, RecordSets]:
        """Return where the current state came from and the record sets we manage now."""

    @abstractmethod
    def write(self, plan: Plan, attempts: Attempts) -> tuple[int, int]:
        """Send the plan's changes; return (update ops, messages)."""

    def plan(self, table: RoutingTable, attempts: Attempts | None = None) -> Plan:
        """Return the changes that would publish ``table`` here."""
        desired = self.desired(table)
        source, current = self.read_current(desired, attempts or Attempts())
        self.metrics.inc("plans")
        return make_plan(self.name, table.version, source, current, desired)

    def apply(self, plan: Plan, attempts: Attempts | None = None) -> PublishResult:
        """Send a plan (not re-checked against the safety valve)."""
        return self._apply(plan, attempts or Attempts(), time.monotonic())

    def publish(
        self,
        table: RoutingTable,
        *,
        force: bool = False,
        dry_run: bool = False,
        on_plan: Callable[[Plan], None] | None = None,
    ) -> PublishResult:
        """Plan, check and apply; raise a ``PublishError`` naming this target on failure."""
        started = time.monotonic()
        attempts = Attempts()
        try:
            plan = self.plan(table, attempts)
            if on_plan is not None:
                on_plan(plan)
            plan.raise_if_unsafe(force)
            if dry_run:
                self.metrics.inc("dry_runs")
                return self._result(plan, 0, 0, attempts, started, dry_run=True)
            return self._apply(plan, attempts, started)
        except PublishError as exc:
            exc.target = exc.target or self.name
            self.metrics.inc("publish_errors")
            self.metrics.inc(exc.counter)
            log.warning("publishing table %s failed: %s", table.version, exc)
            raise

    def _apply(self, plan: Plan, attempts: Attempts, started: float) -> PublishResult:
        ops, messages = self.write(plan, attempts) if plan.changes else (0, 0)
        self.metrics.inc("publishes")
        if not plan.changes:
            self.metrics.inc("publishes_noop")
        for kind in ChangeKind:
            self.metrics.inc(f"rrsets_{kind.value}d", plan.count(kind))
        self.metrics.inc("update_ops", ops)
        self.metrics.inc("messages", messages)
        result = self._result(plan, ops, messages, attempts, started)
        log.info("%s", result.summary())
        return result

    def _result(
        self,
        plan: Plan,
        ops: int,
        messages: int,
        attempts: Attempts,
        started: float,
        dry_run: bool = False,
    ) -> PublishResult:
        return PublishResult(
            target=self.name,
            version=plan.version,
            source=plan.source,
            created=plan.count(ChangeKind.CREATE),
            updated=plan.count(ChangeKind.UPDATE),
            deleted=plan.count(ChangeKind.DELETE),
            unchanged=plan.unchanged,
            update_ops=ops,
            messages=messages,
            attempts=attempts.tries,
            dry_run=dry_run,
            duration_s=time.monotonic() - started,
        )
