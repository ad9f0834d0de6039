"""The loop's durable record: a tick's events and state reach PostgreSQL before Redis.

Order of a tick's writes (``control.tick``):

1. the events, the machines (``LoopState``, compare-and-set on the tick's fence) and the
   table's history row, in one database transaction;
2. then, in one Redis script under the same fence, the machines, the evaluation and the new
   table (published) — plus, when step 1 failed because the database is away, the events, in
   the outbox (``events:outbox``), which a later tick stores once the database answers
   (``drain_outbox``; ``Event.uid`` makes a second write of one event a no-op).

So a database outage loses no event (they wait in Redis), and a Redis restart loses no state:
the machines are read from whichever of Redis and the database holds the newer tick
(``machines``), the counters behind /metrics are added back from the database's copy, and the
table is published again (``restore_if_lost``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import DatabaseError, transaction

from regions.hotstate import UNFENCED, HotState, impairment
from regions.loop import history as controlrecord
from regions.models import Event, LoopState, RoutingTableVersion
from trafficmgr.contracts import machine_from_doc, machine_to_doc
from trafficmgr.routing.failover import RegionMachine
from trafficmgr.routing.table import table_from_json
from trafficmgr.routing.types import RoutingTable

log = logging.getLogger(__name__)

STATE_PK = 1
OUTBOX_BATCH = 500
# The counters behind /metrics are copied to the database at most this often: what a Redis
# restart can lose of them.
COUNTERS_EVERY_S = 5.0
LOST_REDIS_SOURCE = "loop:redis-data-lost"
# After a database error the loop does not ask again for 2 s (shared with the tokens and the
# fleet view): an outage costs a tick one connection timeout every 2 s, not two per tick.
database = impairment.database


class Superseded(Exception):
    """A newer tick (a higher fence) wrote the loop's state already."""

    def __init__(self, fence: int) -> None:
        super().__init__(f"a newer tick (fence {fence}) wrote the loop's state")
        self.fence = fence


def load_state() -> LoopState | None:
    """The durable state, or None when there is none yet or the database is away."""
    if database.open:
        return None
    try:
        state = LoopState.objects.filter(pk=STATE_PK).first()
    except DatabaseError:
        database.failed()
        log.warning("loop state: database unreachable, working from Redis alone")
        return None
    database.succeeded()
    return state


def machines(
    store: HotState, state: LoopState | None, evaluation: Mapping[str, Any]
) -> dict[str, RegionMachine]:
    """The machines of the newest tick: Redis's, unless the database holds a newer tick's
    (Redis lost its data, or a tick's Redis write failed after its database commit)."""
    redis_at = float(evaluation.get("at") or 0.0)
    if state is not None and state.machines and state.at > redis_at:
        return {name: machine_from_doc(doc) for name, doc in state.machines.items()}
    return store.machines()


def commit(
    events: Sequence[Event],
    machines_now: Mapping[str, RegionMachine],
    fence: int,
    now: float,
    update: controlrecord.TableUpdate | None,
    counters: Mapping[str, float] | None,
) -> tuple[bool, bool]:
    """Write the tick's events, state and history row at once; return whether that was
    written (False: the database is away) and whether the table got a history row.

    Raises ``Superseded`` when a newer tick wrote the state already (nothing is written).
    """
    recorded = False
    if database.open:
        return False, False
    try:
        with transaction.atomic():
            _save_state(machines_now, fence, now, update, counters)
            if events:
                Event.objects.bulk_create(events, ignore_conflicts=True)
            if update is not None:
                recorded = controlrecord.record_version(update, now)
    except DatabaseError:
        database.failed()
        log.warning("tick at %.3f: database unreachable; its events wait in Redis", now)
        return False, False
    return True, recorded


def _save_state(
    machines_now: Mapping[str, RegionMachine],
    fence: int,
    now: float,
    update: controlrecord.TableUpdate | None,
    counters: Mapping[str, float] | None,
) -> None:
    fields: dict[str, Any] = {
        "at": now,
        "machines": {name: machine_to_doc(m) for name, m in machines_now.items()},
    }
    if update is not None:
        fields["table_version"] = update.table.version
    if counters is not None:
        fields |= {"counters": dict(counters), "counters_at": now}
    rows = LoopState.objects.filter(pk=STATE_PK)
    if fence != UNFENCED:
        rows, fields["fence"] = rows.filter(fence__lt=fence), fence
    if rows.update(**fields):
        return
    held = LoopState.objects.select_for_update().filter(pk=STATE_PK).first()
    if held is None:
        LoopState.objects.create(pk=STATE_PK, **fields)
        return
    raise Superseded(held.fence)


def counters_due(state: LoopState | None, now: float) -> bool:
    return state is None or now - state.counters_at >= COUNTERS_EVERY_S


def drain_outbox(store: HotState) -> int:
    """Store the events that waited in Redis for the database; return how many."""
    stored = 0
    while True:
        raw = store.outbox(OUTBOX_BATCH)
        if not raw:
            return stored
        rows = [controlrecord.event_from_json(item) for item in raw]
        try:
            Event.objects.bulk_create(rows, ignore_conflicts=True)
        except DatabaseError:
            database.failed()
            return stored
        store.trim_outbox(len(raw))
        stored += len(raw)
        log.info("stored %d events that waited for the database", len(raw))


def restore_if_lost(store: HotState, state: LoopState | None, now: float) -> bool:
    """Notice a Redis that lost its data and put back what the database keeps.

    The first process to claim the new dataset (``epoch``) adds the counters' copy back and
    records the gap since the last durable tick as the control plane's own impairment: the
    heartbeats of that gap are gone with the data, which the loop must not read as silence.
    """
    if store.epoch() is not None:
        return False
    if not store.claim_epoch(uuid.uuid4().hex):
        return False
    if state is None or not state.at:
        return False  # a first start, not a loss
    log.warning("the hot state lost its data (Redis restarted?); restoring from the database")
    store.add_impairment(LOST_REDIS_SOURCE, (state.at, now))
    if state.counters:
        store.incr(state.counters.items())
    return True


def last_table(store: HotState) -> RoutingTable | None:
    """The newest table known: Redis's, else the newest recorded one."""
    table = store.table()
    if table is not None or database.open:
        return table
    try:
        row = RoutingTableVersion.objects.first()
    except DatabaseError:
        database.failed()
        return None
    return table_from_json(row.table) if row is not None else None
