"""What a running drill watches: agents taking the fault, the published tables, the events
that show the fault was detected, and the target's recovery.

``DrillRun`` (``runner``) drives the phases and decides; these are the readings it takes
between its decisions, each filling ``Observations`` for the report. Kept apart from the
runner because they read only the hot state and the event log and change nothing, so the
order of phases, restoring and the final status (the runner's concern) read on one page.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from regions.drills.measure import target_share
from regions.drills.report import Observations, TableSample
from regions.drills.spec import DrillSpec
from regions.hotstate import HotState
from regions.models import Event, EventKind
from trafficmgr.routing.types import Fleet, RegionState

POLL_S = 0.1
RECOVERED_STATES = ("healthy", "degraded")


class DrillWatch:
    """The readings of ``DrillRun``, which holds the drill's spec, fleet, store and figures."""

    spec: DrillSpec
    fleet: Fleet
    store: HotState
    obs: Observations
    say: Callable[[str], None]
    injected: bool  # the fault is in (table changes from then on are told)
    before_state: str  # the target region's state before the fault
    _last_version: str | None  # the last table version read

    def all_taken(self) -> bool:
        return all(e in self.obs.taken_at for e in self.spec.endpoints)

    def watch_agents(self) -> None:
        """Note when each agent took the fault: its first heartbeat after the injection."""
        waiting = [e for e in self.spec.endpoints if e not in self.obs.taken_at]
        if not waiting:
            return
        # A heartbeat received a moment before the injection may still have carried it.
        since = self.obs.injected_at - 0.05
        for name, hb in self.store.heartbeats(waiting).items():
            if hb.received_at >= since:
                self.obs.taken_at[name] = hb.received_at
                if self.all_taken():
                    spread = hb.received_at - self.obs.injected_at
                    self.say(f"+{spread:.1f}s every instructed agent took the fault")

    def watch_table(self) -> None:
        table = self.store.table()
        if table is None or table.version == self._last_version:
            return
        self._last_version = table.version
        status = table.regions.get(self.spec.region)
        share = target_share(table, self.fleet, self.spec.region)
        sample = TableSample(
            table.generated_at,
            table.version,
            share,
            status.state.value if status is not None else "",
            status.ramp if status is not None else 0.0,
        )
        last = self.obs.tables[-1] if self.obs.tables else None
        moved = last is not None and (
            last.state != sample.state or abs(last.share - sample.share) >= 0.005
        )
        if self.injected and moved and last is not None:
            self.say(
                f"+{sample.at - self.obs.injected_at:.1f}s table {table.version}: "
                f"{self.spec.region} {sample.state}, share {last.share:.2f} → {share:.2f}"
            )
        self.obs.tables.append(sample)

    def watch_for(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            self.watch_table()
            time.sleep(POLL_S)

    def detect(self) -> bool:
        """Look for the first Event that shows the fault was seen; True when found now."""
        if self.obs.detected_at is not None:
            return False
        since = dt.datetime.fromtimestamp(self.obs.injected_at - 0.5, dt.UTC)
        events = Event.objects.filter(
            at__gte=since, kind__in=[EventKind.FAILOVER, EventKind.HEALTH]
        ).order_by("at", "id")
        spec = self.spec
        by_region = spec.whole_region
        by_endpoint = not spec.whole_region or spec.kind in ("gpu_degraded", "latency")
        # A region taken out must go down; a partial fault may show as degraded.
        wanted = {RegionState.DOWN.value}
        if not spec.region_out:
            wanted.add(RegionState.DEGRADED.value)
        for event in events.filter(region=spec.region):
            data = event.data or {}
            seen = (by_region and not event.endpoint and data.get("new") in wanted) or (
                by_endpoint and event.endpoint in spec.endpoints and data.get("healthy") is False
            )
            if seen:
                self.obs.detected_at = event.at.timestamp()
                self.obs.detected_by = event.message[:300]
                return True
        return False

    def recovered(self) -> bool:
        """Tell whether the target is back: state, ramp complete, endpoints healthy."""
        table = self.store.table()
        evaluation = self.store.evaluation()
        restore = self.obs.restore_at or 0.0
        if table is None or float(evaluation.get("at") or 0.0) <= restore:
            return False
        status = table.regions.get(self.spec.region)
        wanted = {*RECOVERED_STATES, self.before_state} - {"down", "recovering", ""}
        if status is None or status.state.value not in wanted or status.ramp < 1.0:
            return False
        docs = evaluation.get("endpoints", {})
        if not all(docs.get(e, {}).get("healthy") for e in self.spec.endpoints):
            return False
        self.obs.recovered_at = max(float(evaluation["at"]), table.generated_at)
        self.say(f"recovered {self.obs.recovered_at - restore:.1f}s after the restore")
        return True
