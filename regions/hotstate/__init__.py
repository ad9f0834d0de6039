"""Hot state: latest heartbeats, region machines, the published table, counters and the tick lock.

Two stores with one interface (``protocols.HotState``, split by concern): Redis when
``REDIS_URL`` is set (shared by every web process, worker and DNS server; ``redis_store``), a
process-local store otherwise (the embedded demo and the tests; ``memory``). The key names and
value layouts are the cross-process contract in ``trafficmgr.contracts``.
"""

from __future__ import annotations

import threading

from django.conf import settings

from regions import conf
from regions.hotstate import impairment
from regions.hotstate.memory import MemoryHotState
from regions.hotstate.protocols import (
    RESTART_GAP_S,
    UNFENCED,
    CompletionStream,
    Counters,
    DrillMailbox,
    HeartbeatPut,
    HeartbeatStore,
    HotState,
    Lease,
    LoopStateStore,
    Order,
    PutResult,
    Stored,
    TableStore,
    TickState,
    Versions,
    is_newer,
)
from trafficmgr.contracts import Completion, StreamEntry, stream_position

__all__ = [
    "RESTART_GAP_S",
    "UNFENCED",
    "Completion",
    "CompletionStream",
    "Counters",
    "DrillMailbox",
    "HeartbeatPut",
    "HeartbeatStore",
    "HotState",
    "Lease",
    "LoopStateStore",
    "MemoryHotState",
    "Order",
    "PutResult",
    "Stored",
    "StreamEntry",
    "TableStore",
    "TickState",
    "Versions",
    "get",
    "is_newer",
    "note_impairment",
    "stream_position",
    "use",
]

_store: HotState | None = None
_store_lock = threading.Lock()


def get() -> HotState:
    """Return this process's hot state: Redis when REDIS_URL is set, else in-process."""
    global _store
    if _store is None:
        with _store_lock:
            if _store is None:
                url = getattr(settings, "REDIS_URL", "")
                if url:
                    from regions.hotstate.redis_store import RedisHotState

                    _store = RedisHotState(url, timeout_s=conf.hotstate_timeout_s())
                else:
                    _store = MemoryHotState()
    return _store


def use(store: HotState | None) -> None:
    """Replace this process's hot state (tests); None goes back to the configured one."""
    global _store
    _store = store


def note_impairment() -> None:
    """Record that this process refused a heartbeat for its own reasons (a store away), and
    hand the spell to the hot state now if it answers (else with its next heartbeat)."""
    impairment.note()
    spell = impairment.pending()
    if spell is None:
        return
    try:
        get().add_impairment(impairment.source(), spell)
    except Exception:  # the hot state is away too: the Redis store hands it over later
        return
    impairment.taken(spell)
