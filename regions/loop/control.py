"""The control loop's tick: heartbeats → health → failover machines → routing table → publish.

``run_tick(now)`` runs one tick under the tick lock (Redis ``SET NX PX`` in the distributed
mode, a threading lock in-process); when another tick holds it, this one is skipped and
counted, never queued behind it. A tick longer than the interval is reported (metric and
log). A table whose version changed is published (hot state: Redis key + pub/sub, which the
DNS servers read), sent to the dashboard group, and recorded as a ``RoutingTableVersion``
when it differs materially from the last recorded one (see ``should_record``).

``EmbeddedTicker`` runs ticks from a thread for the one-process demo.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.db import close_old_connections, connection, transaction

from regions import conf, hotstate, metrics
from regions.fleet import snapshot
from regions.hotstate import HotState
from regions.loop import history as controlrecord
from regions.loop.retention import purge_history_now
from trafficmgr.heap import HeapKeeper
from trafficmgr.routing.failover import (
    FleetEvaluation,
    Transition,
    evaluate_fleet,
    with_pauses,
)
from trafficmgr.routing.table import compile_table
from trafficmgr.routing.types import Heartbeat

log = logging.getLogger(__name__)

LOCK_MIN_TTL_S = 30.0  # a worker that dies mid-tick blocks ticks at most this long


@dataclass(frozen=True, slots=True)
class TickResult:
    ran: bool  # False: another tick held the lock
    version: str | None = None
    changed: bool = False  # a new table version was published
    recorded: bool = False  # ... and stored in the history
    transitions: tuple[Transition, ...] = ()
    duration_s: float = 0.0
    overran: bool = False
    phases: tuple[tuple[str, float], ...] = ()  # seconds per phase of the tick, in order


class PhaseClock:
    """Time the phases of one tick (wall clock, in order)."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        """Close the phase that ran since the previous mark."""
        now = time.perf_counter()
        self.phases.append((name, now - self._last))
        self._last = now


def tick_seconds() -> float:
    return conf.tick_seconds()


# Run once, on this process's first tick (registered by the app's wiring, e.g. restoring the
# faults of drills whose runner died): the loop calls them without knowing what they are.
_first_tick_hooks: list[Callable[[], object]] = []
_first_tick_done = False


def on_first_tick(hook: Callable[[], object]) -> None:
    """Call ``hook`` before this process's first tick (once; registering twice is a no-op)."""
    if hook not in _first_tick_hooks:
        _first_tick_hooks.append(hook)


def _run_first_tick_hooks() -> None:
    global _first_tick_done
    if _first_tick_done:
        return
    _first_tick_done = True
    for hook in _first_tick_hooks:
        try:
            hook()
        except Exception:
            log.exception("first-tick hook %s failed", getattr(hook, "__name__", hook))


def run_tick(
    now: float | None = None, *, interval_s: float | None = None, keep_heap: bool = False
) -> TickResult:
    """Run one tick unless another one is running; ``now`` defaults to the clock.

    ``keep_heap``: this process does nothing but tick (the Celery worker), so after the tick
    it may freeze the heap's settled objects, keeping full collections out of the next tick
    (``trafficmgr.heap``).
    """
    interval = interval_s if interval_s is not None else tick_seconds()
    store = hotstate.get()
    with store.tick_lock(max(LOCK_MIN_TTL_S, 10 * interval)) as held:
        if not held:
            metrics.count_tick_skipped()
            log.info("tick skipped: another tick is still running")
            return TickResult(ran=False)
        _run_first_tick_hooks()
        started = time.perf_counter()
        at = time.time() if now is None else now
        result = tick(store, at)
        duration = time.perf_counter() - started
    overran = duration > interval
    metrics.observe_tick(duration, overran, at)
    if overran:
        log.warning(
            "tick took %.3f s, longer than the %.3f s interval (%s)",
            duration,
            interval,
            ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in result.phases),
        )
    _refresh_fleet_between_ticks()
    if keep_heap:
        _keep_heap_between_ticks()
    return replace(result, duration_s=duration, overran=overran)


_heap: HeapKeeper | None = None


def _keep_heap_between_ticks() -> None:
    """Collect what the tick made and freeze what survived (the first time: everything)."""
    global _heap
    if _heap is None:
        _heap = HeapKeeper(freeze_every_s=0.0)
        _heap.settle()
    else:
        _heap.tick()


def _refresh_fleet_between_ticks() -> None:
    """Reload a fleet view about to expire now, so that the next tick does not wait for it."""
    try:
        snapshot.refresh_ahead()
    except Exception:  # the next tick reloads it itself
        log.exception("reloading the fleet between ticks failed")


def tick(store: HotState, now: float) -> TickResult:
    """Evaluate the fleet once and publish the table if it changed (lock already held)."""
    clock = PhaseClock()
    view = snapshot.current()
    clock.mark("fleet")
    heartbeats = store.heartbeats(histograms=False)  # output lengths are /route's business
    clock.mark("heartbeats")
    machines = with_pauses(store.machines(), view.paused, [r.name for r in view.fleet.regions], now)
    evaluation = evaluate_fleet(view.fleet, heartbeats, machines, now)
    clock.mark("evaluate")
    previous = store.table()
    table = compile_table(view.fleet, evaluation.statuses, now, previous=previous)
    clock.mark("compile")
    store.set_machines(evaluation.machines)
    old_doc = store.evaluation()
    new_doc = evaluation_doc(evaluation, heartbeats, now)
    store.set_evaluation(new_doc)
    flips = controlrecord.endpoint_flips(old_doc, new_doc)
    clock.mark("state")
    changed = previous is None or table.version != previous.version
    update = controlrecord.TableUpdate.of(previous, table) if changed else None
    clock.mark("diff")
    with transaction.atomic():
        controlrecord.record_events(evaluation.transitions, flips, table.version, now)
        recorded = controlrecord.record_version(update, now) if update is not None else False
    clock.mark("record")
    if update is not None:
        store.publish_table(table, update.doc, update.text)
        metrics.count_publish()
        clock.mark("publish")
        controlrecord.notify_dashboard(update, evaluation.transitions)
        clock.mark("dashboard")
    return TickResult(
        True, table.version, changed, recorded, evaluation.transitions, phases=tuple(clock.phases)
    )


def evaluation_doc(
    evaluation: FleetEvaluation, heartbeats: Mapping[str, Heartbeat], now: float
) -> dict[str, Any]:
    """Summarise an evaluation for the metrics, the dashboard and the next tick's events."""
    endpoints = {}
    for name, h in evaluation.endpoints.items():
        hb = heartbeats.get(name)
        endpoints[name] = {
            "region": h.region,
            "healthy": h.healthy,
            "score": h.score,
            "load": h.load,
            "capacity": h.capacity,
            "reason": h.reason,
            "evidence": h.evidence,
            "received_at": hb.received_at if hb else None,
            "sent_at": hb.sent_at if hb else None,
        }
    regions = {
        name: {"state": m.state.value, "since": m.since, "paused": m.paused}
        for name, m in evaluation.machines.items()
    }
    return {"at": now, "endpoints": endpoints, "regions": regions}


class EmbeddedTicker:
    """Run ticks (and the hourly history purge) from a thread: the embedded demo's loop."""

    def __init__(self, interval_s: float | None = None, *, purge_every_s: float = 3600.0) -> None:
        self.interval_s = interval_s if interval_s is not None else tick_seconds()
        self.purge_every_s = purge_every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.missed = 0  # interval slots skipped because a tick overran

    def start(self) -> EmbeddedTicker:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="trafficmgr-ticker", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        next_at = time.monotonic()
        next_purge = next_at + self.purge_every_s
        try:
            while not self._stop.is_set():
                self._once()
                if time.monotonic() >= next_purge:
                    next_purge = time.monotonic() + self.purge_every_s
                    self._purge()
                next_at += self.interval_s
                late = time.monotonic() - next_at
                if late > 0:  # overran: drop the missed slots, never run them back to back
                    skipped = int(late // self.interval_s) + 1
                    self.missed += skipped
                    next_at += skipped * self.interval_s
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            connection.close()

    def _once(self) -> None:
        close_old_connections()
        try:
            run_tick(time.time(), interval_s=self.interval_s)
            self.ticks += 1
        except Exception:
            log.exception("tick failed")

    def _purge(self) -> None:
        try:
            purge_history_now(time.time())
        except Exception:
            log.exception("history purge failed")
