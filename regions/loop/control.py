"""The control loop's tick: heartbeats → health → failover machines → routing table → publish.

``run_tick(now)`` runs one tick under the tick lock (Redis ``SET NX PX`` in the distributed
mode, a threading lock in-process); when another tick holds it, this one is skipped and
counted, never queued behind it. The lock lives ``LOCK_TTL_INTERVALS`` tick intervals and is
renewed while the tick runs, so a worker killed mid-tick costs at most that many intervals;
each lease carries a fencing token, and a tick whose lease was overtaken (it stalled past the
expiry) writes nothing. A tick longer than the interval is reported (metric and log).

A tick writes its events, machines and table history to the database first, then its state
and table to Redis (``durable``): either store failing loses no event. While the control plane
itself was recently unable to take heartbeats (``hold``) the tick keeps the last decision. A
table whose version changed is published (hot state: Redis key + pub/sub, which the DNS
servers read), sent to the dashboard group, and recorded as a ``RoutingTableVersion`` when it
differs materially from the last recorded one (see ``should_record``).

``EmbeddedTicker`` runs ticks from a thread for the one-process demo.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.db import close_old_connections, connection

from regions import conf, hotstate, metrics
from regions.fleet import snapshot
from regions.hotstate import UNFENCED, HotState, TickState
from regions.loop import durable, hold
from regions.loop import history as controlrecord
from regions.loop.retention import purge_history_now
from regions.models import Event, LoopState
from trafficmgr.routing.endpoint_state import (
    shown_reason,
    state_from_doc,
    state_to_doc,
    step_endpoint,
)
from trafficmgr.routing.failover import (
    FleetEvaluation,
    Transition,
    evaluate_fleet,
    with_pauses,
)
from trafficmgr.routing.slowstart import health_since
from trafficmgr.routing.table import compile_table
from trafficmgr.routing.types import Heartbeat
from trafficmgr.runtime.heap import HeapKeeper

log = logging.getLogger(__name__)

# The tick lock's lifetime in tick intervals (renewed every third of it while a tick runs): a
# worker that dies mid-tick blocks the loop at most this long, so the beat's next tick but
# one runs: a killed tick costs two intervals.
LOCK_TTL_INTERVALS = 1.5
LOCK_MIN_TTL_S = 0.5


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
    held: bool = False  # the control plane was impaired: the last decision was kept
    superseded: bool = False  # a newer tick's lease overtook this one: nothing was written


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


def lock_ttl(interval_s: float) -> float:
    return max(LOCK_MIN_TTL_S, LOCK_TTL_INTERVALS * interval_s)


# The fence to take at least: the durable state's, so that a Redis that lost its counter
# still hands out fences newer than the last tick's.
_fence_floor = 0
_held_for: tuple[float, float] | None = None  # the spell the last held tick logged


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
    (``trafficmgr.runtime.heap``).
    """
    interval = interval_s if interval_s is not None else tick_seconds()
    store = hotstate.get()
    with store.tick_lock(lock_ttl(interval), _fence_floor) as lease:
        if not lease:
            metrics.count_tick_skipped()
            log.info("tick skipped: another tick is still running")
            return TickResult(ran=False)
        _run_first_tick_hooks()
        started = time.perf_counter()
        at = time.time() if now is None else now
        result = tick(store, at, lease.fence)
        duration = time.perf_counter() - started
    overran = duration > interval
    metrics.observe_tick(duration, overran, at, result.held)
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


def tick(store: HotState, now: float, fence: int = UNFENCED) -> TickResult:
    """Evaluate the fleet once and publish the table if it changed (lock already held)."""
    global _fence_floor
    clock = PhaseClock()
    view = snapshot.current()
    state = durable.load_state()
    if state is not None:
        _fence_floor = max(_fence_floor, state.fence + 1)
    durable.restore_if_lost(store, state, now)
    clock.mark("fleet")
    spell = hold.holding(store.impairments(), view.fleet.failover, now)
    if spell is not None:
        return held_tick(store, spell, now, clock)
    heartbeats = store.heartbeats(histograms=False)  # output lengths are /route's business
    clock.mark("heartbeats")
    old_doc = store.evaluation()
    machines = with_pauses(
        durable.machines(store, state, old_doc),
        view.paused,
        [r.name for r in view.fleet.regions],
        now,
    )
    evaluation = evaluate_fleet(view.fleet, heartbeats, machines, now)
    clock.mark("evaluate")
    previous = store.table()
    table = compile_table(view.fleet, evaluation.statuses, now, previous=previous)
    clock.mark("compile")
    new_doc = evaluation_doc(
        evaluation, heartbeats, now, old_doc, hold_down_s=view.fleet.failover.hold_down_s
    )
    flips = controlrecord.endpoint_flips(old_doc, new_doc)
    changed = previous is None or table.version != previous.version
    update = controlrecord.TableUpdate.of(previous, table) if changed else None
    clock.mark("diff")
    events = controlrecord.event_rows(evaluation.transitions, flips, table.version, now)
    written = write_tick(store, fence, state, evaluation, new_doc, update, events, now)
    clock.mark("write")
    if written is None:
        return TickResult(True, superseded=True, phases=tuple(clock.phases))
    if update is not None:
        metrics.count_publish()
        controlrecord.notify_dashboard(update, evaluation.transitions)
        clock.mark("dashboard")
    return TickResult(
        True,
        table.version,
        changed,
        written,
        evaluation.transitions,
        phases=tuple(clock.phases),
    )


def write_tick(
    store: HotState,
    fence: int,
    state: LoopState | None,
    evaluation: FleetEvaluation,
    doc: dict[str, Any],
    update: controlrecord.TableUpdate | None,
    events: list[Event],
    now: float,
) -> bool | None:
    """Write the events and state to the database, then the state and table to Redis (the
    events into its outbox when the database is away); return whether the table got a
    history row, or None when a newer tick's lease overtook this one (nothing published)."""
    global _fence_floor
    counters = store.counters() if durable.counters_due(state, now) else None
    try:
        committed, recorded = durable.commit(
            events, evaluation.machines, fence, now, update, counters
        )
    except durable.Superseded as exc:
        _fence_floor = max(_fence_floor, exc.fence + 1)
        log.warning("tick at %.3f overtaken by a newer tick: nothing written", now)
        return None
    if committed and fence != UNFENCED:
        _fence_floor = max(_fence_floor, fence + 1)
    outbox = () if committed else tuple(controlrecord.event_to_json(e) for e in events)
    table = update.table if update is not None else None
    text = update.text if update is not None else None
    if not store.save_tick(TickState(fence, evaluation.machines, doc, table, text, outbox)):
        log.warning("tick at %.3f overtaken by a newer tick: its state was not published", now)
        return None
    if committed:
        durable.drain_outbox(store)
    return recorded


def held_tick(
    store: HotState, spell: tuple[float, float], now: float, clock: PhaseClock
) -> TickResult:
    """Keep the last decision: no evaluation, no event; the table published again if lost."""
    global _held_for
    metrics.count_tick_held()
    log.log(
        logging.WARNING if spell != _held_for else logging.DEBUG,
        "tick at %.3f held: the control plane could not take heartbeats from %.3f to %.3f",
        now,
        *spell,
    )
    _held_for = spell
    table = store.table()
    if table is None:
        table = durable.last_table(store)
        if table is not None:
            store.publish_table(table)
    clock.mark("held")
    version = table.version if table is not None else None
    return TickResult(True, version, held=True, phases=tuple(clock.phases))


def evaluation_doc(
    evaluation: FleetEvaluation,
    heartbeats: Mapping[str, Heartbeat],
    now: float,
    old_doc: Mapping[str, Any] | None = None,
    *,
    hold_down_s: float = 0.0,
) -> dict[str, Any]:
    """Summarise an evaluation for the metrics, the dashboard, the next tick's events and
    ``/route``'s slow start (``since``: when each endpoint's health last flipped); ``state``
    and ``state_since`` are the state an endpoint is shown in, carried to the next tick."""
    endpoints = {}
    before = (old_doc or {}).get("endpoints") or {}
    for name, h in evaluation.endpoints.items():
        hb = heartbeats.get(name)
        was = before.get(name)
        # the state shown, held by the band and hold-down as regions are (endpoint_state.py)
        shown = step_endpoint(h, state_from_doc(was), hold_down_s, now)
        since = (
            health_since(
                None if was is None else bool(was.get("healthy")),
                None if was is None else was.get("since"),
                h.healthy,
                now,
            )
            if before
            else None
        )
        endpoints[name] = {
            "region": h.region,
            "healthy": h.healthy,
            "score": h.score,
            "load": h.load,
            "capacity": h.capacity,
            "reason": shown_reason(h, shown, hold_down_s, now),
            "strain": h.strain,
            **state_to_doc(shown),
            "evidence": h.evidence,
            "received_at": hb.received_at if hb else None,
            "sent_at": hb.sent_at if hb else None,
            "since": since,
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
