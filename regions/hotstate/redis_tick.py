"""The control loop's lease in Redis: the tick lock with its fencing token, the fenced
all-or-nothing save of a tick, the events outbox that save fills, and the loop's epoch.

Kept apart because these are the store's concurrency guarantees (docs/architecture.md §5:
one tick at a time across workers, no stale write after a lost lease), read and tested as
one piece (tests/regions/hotstate/test_tick_lease.py).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from regions.hotstate import impairment
from regions.hotstate.protocols import Lease, TickState
from trafficmgr.contracts import (
    EPOCH_KEY,
    EVALUATION_KEY,
    EVALUATION_STAMP_KEY,
    EVENTS_OUTBOX_KEY,
    MACHINES_KEY,
    TABLE_CHANNEL_SUFFIX,
    TABLE_KEY,
    TABLE_VERSION_KEY,
    TICK_FENCE_KEY,
    TICK_LOCK_KEY,
    json_bytes,
    machine_to_doc,
)
from trafficmgr.routing.table import table_to_json
from trafficmgr.routing.types import RoutingTable


class RedisTickLease:
    """The tick lease of ``RedisHotState`` (which provides the connection, keys and scripts)."""

    redis: Redis
    key: Callable[[str], str]
    _acquire: Any  # the registered ACQUIRE_LUA, RENEW_LUA, RELEASE_LUA, SAVE_TICK_LUA scripts
    _renew: Any
    _release: Any
    _save_tick: Any
    _evaluation: tuple[str, dict[str, Any]] | None  # the read caches a save refreshes
    _cached_table: RoutingTable | None

    @contextmanager
    def tick_lock(self, ttl_s: float, fence_floor: int = 0) -> Iterator[Lease]:
        """Hold the tick lock for ``ttl_s``, renewed every third of it while the tick runs.

        The lock's value names this process (``host:pid:nonce``), so an operator or a fault
        test can tell which worker holds it. A worker that dies mid-tick leaves it to expire
        within ``ttl_s``; one that stalls past that loses it, and its fence is then older than
        the next tick's, so ``save_tick`` refuses what it would write.
        """
        token = f"{impairment.source()}:{uuid.uuid4().hex}"
        key = self.key(TICK_LOCK_KEY)
        ttl_ms = max(1, int(ttl_s * 1000))
        fence = int(
            self._acquire(keys=[key, self.key(TICK_FENCE_KEY)], args=[token, ttl_ms, fence_floor])
        )
        lease = Lease(fence > 0, fence)
        done = threading.Event()
        if lease.held:
            threading.Thread(
                target=self._keep_lease,
                args=(lease, key, token, ttl_ms, done),
                name="trafficmgr-tick-lease",
                daemon=True,
            ).start()
        try:
            yield lease
        finally:
            done.set()
            if lease.held:
                with contextlib.suppress(RedisError):
                    self._release(keys=[key], args=[token])

    def _keep_lease(
        self, lease: Lease, key: str, token: str, ttl_ms: int, done: threading.Event
    ) -> None:
        while not done.wait(ttl_ms / 3000):
            try:
                if not self._renew(keys=[key], args=[token, ttl_ms]):
                    lease.lost = True
                    return
            except RedisError:  # the next renewal tries again; expiry is the fallback
                continue

    def save_tick(self, state: TickState) -> bool:
        """Write a tick's state, its new table (published) and its outbox, all or nothing,
        unless a newer lease was taken since; return whether it was written."""
        stamp = uuid.uuid4().hex
        evaluation = json_bytes(dict(state.evaluation))
        text = b""
        if state.table is not None:
            text = state.table_text or json_bytes(table_to_json(state.table))
        keys = [
            self.key(TICK_FENCE_KEY),
            self.key(MACHINES_KEY),
            self.key(EVALUATION_KEY),
            self.key(EVALUATION_STAMP_KEY),
            self.key(EVENTS_OUTBOX_KEY),
            self.key(TABLE_KEY),
            self.key(TABLE_VERSION_KEY),
        ]
        args: list[Any] = [
            state.fence,
            json_bytes({name: machine_to_doc(m) for name, m in state.machines.items()}),
            evaluation,
            stamp,
            state.table.version if state.table is not None else "",
            text,
            self.key(TABLE_CHANNEL_SUFFIX),
            *state.outbox,
        ]
        if not self._save_tick(keys=keys, args=args):
            return False
        self._evaluation = (stamp, dict(state.evaluation))
        if state.table is not None:
            self._cached_table = state.table
        return True

    def outbox(self, count: int) -> list[bytes]:
        raw = self.redis.lrange(self.key(EVENTS_OUTBOX_KEY), 0, count - 1)
        return [item.encode() if isinstance(item, str) else item for item in raw]

    def trim_outbox(self, count: int) -> None:
        self.redis.ltrim(self.key(EVENTS_OUTBOX_KEY), count, -1)

    def epoch(self) -> str | None:
        value = self.redis.get(self.key(EPOCH_KEY))
        return str(value) if value else None

    def claim_epoch(self, epoch: str) -> bool:
        return bool(self.redis.set(self.key(EPOCH_KEY), epoch, nx=True))
