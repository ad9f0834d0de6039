"""The process-local hot state (embedded mode, tests): every concern behind one lock."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from regions.hotstate.protocols import (
    HeartbeatPut,
    Lease,
    Order,
    PutResult,
    Stored,
    TickState,
    is_newer,
    stored_seq,
)
from trafficmgr.contracts import (
    COMPLETIONS_MAXLEN,
    Completion,
    StreamEntry,
    stream_position,
)
from trafficmgr.routing.failover import RegionMachine
from trafficmgr.routing.types import Heartbeat, RoutingTable


class MemoryHotState:
    """The process-local store (embedded mode, tests); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._completion_seq = 0  # not reset: ids stay ascending for readers of this store
        self._fence = 0  # not reset: fences only grow
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._hb: dict[str, Heartbeat] = {}
            self._meta: dict[str, tuple[Stored, int]] = {}  # endpoint → (order, bucket)
            self._totals: dict[str, dict[str, list[int]]] = {}
            self._machines: dict[str, RegionMachine] = {}
            self._evaluation: dict[str, Any] = {}
            self._table: RoutingTable | None = None
            self._drills: dict[str, tuple[float, dict[str, Any]]] = {}
            self._config_version = 0
            self._token_version = 0
            self._counters: dict[str, float] = {}
            self._tick: dict[str, float] = {}
            self._completions: dict[str, deque[tuple[int, Completion]]] = {}
            self.listeners: list[Callable[[RoutingTable], None]] = []
            self._outbox: list[bytes] = []
            self._impairments: dict[str, tuple[float, float]] = {}
            self._epoch = "memory"

    def put_heartbeat(
        self,
        hb: Heartbeat,
        bucket: int,
        totals: Mapping[str, list[int]] | None = None,
        order: Order | None = None,
    ) -> PutResult:
        order = order or Order()
        with self._lock:
            found = self._meta.get(hb.endpoint)
            old = found[0] if found is not None else None
            if old is not None and not is_newer(hb.seq, hb.sent_at, hb.received_at, order, old):
                return PutResult(False, False)
            seq = stored_seq(hb.seq, hb.received_at, order, old)
            self._meta[hb.endpoint] = (
                Stored(seq, hb.sent_at, hb.received_at, order.session),
                bucket,
            )
            self._hb[hb.endpoint] = hb
            self._totals[hb.endpoint] = dict(totals or {})
            fresh = found is None or found[1] != bucket
        return PutResult(True, fresh, self.pop_drill(hb.endpoint))

    def put_heartbeats(self, items: Sequence[HeartbeatPut]) -> list[PutResult]:
        return [self.put_heartbeat(*item) for item in items]

    def error_totals(self, endpoint: str) -> dict[str, list[int]]:
        with self._lock:
            return dict(self._totals.get(endpoint, {}))

    def heartbeats(
        self, names: Iterable[str] | None = None, histograms: bool = True
    ) -> dict[str, Heartbeat]:
        """Return the latest heartbeats (held as objects: ``histograms`` costs nothing here)."""
        with self._lock:
            if names is None:
                return dict(self._hb)
            return {n: self._hb[n] for n in names if n in self._hb}

    def machines(self) -> dict[str, RegionMachine]:
        with self._lock:
            return dict(self._machines)

    def set_machines(self, machines: Mapping[str, RegionMachine]) -> None:
        with self._lock:
            self._machines = dict(machines)

    def evaluation(self) -> dict[str, Any]:
        with self._lock:
            return self._evaluation

    def set_evaluation(self, doc: Mapping[str, Any]) -> None:
        with self._lock:
            self._evaluation = dict(doc)

    def table(self) -> RoutingTable | None:
        return self._table

    def table_version(self) -> str | None:
        table = self._table
        return table.version if table is not None else None

    def publish_table(
        self, table: RoutingTable, doc: dict[str, Any] | None = None, text: bytes | None = None
    ) -> None:
        self._table = table
        for listener in list(self.listeners):
            listener(table)

    def follow_tables(self, listener: Callable[[RoutingTable], None]) -> Callable[[], None]:
        """Call ``listener`` on every publication of this process (the only one sharing it)."""
        table = self._table
        self.listeners.append(listener)
        if table is not None:
            listener(table)

        def stop() -> None:
            if listener in self.listeners:
                self.listeners.remove(listener)

        return stop

    def set_drill(self, endpoint: str, instruction: Mapping[str, Any], ttl_s: float) -> None:
        with self._lock:
            self._drills[endpoint] = (time.monotonic() + ttl_s, dict(instruction))

    def pop_drill(self, endpoint: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._drills.pop(endpoint, None)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def add_completions(self, by_region: Mapping[str, Sequence[Completion]]) -> None:
        """Append to each region's bounded stream (ids ``"0-<n>"``, ascending)."""
        with self._lock:
            for region, items in by_region.items():
                stream = self._completions.get(region)
                if stream is None:
                    stream = self._completions[region] = deque(maxlen=COMPLETIONS_MAXLEN)
                for c in items:
                    self._completion_seq += 1
                    stream.append((self._completion_seq, c))

    def completions(self, region: str, after: str | None, count: int) -> list[StreamEntry]:
        """Return up to ``count`` entries after the id ``after``, oldest first; with ``after``
        None the last ``count`` of the stream."""
        last = -1 if after is None else stream_position(after)[1]
        chosen: list[tuple[int, Completion]] = []
        with self._lock:
            for item in reversed(self._completions.get(region, ())):
                if item[0] <= last or (after is None and len(chosen) >= count):
                    break
                chosen.append(item)
        chosen.reverse()
        return [(f"0-{seq}", c) for seq, c in chosen[: max(0, count)]]

    @contextmanager
    def tick_lock(self, ttl_s: float, fence_floor: int = 0) -> Iterator[Lease]:
        held = self._tick_lock.acquire(blocking=False)
        lease = Lease(held)
        if held:
            with self._lock:
                self._fence = max(self._fence + 1, fence_floor)
                lease.fence = self._fence
        try:
            yield lease
        finally:
            if held:
                self._tick_lock.release()

    def save_tick(self, state: TickState) -> bool:
        """Store what a tick leaves (unless a newer tick's fence came since) and publish."""
        with self._lock:
            if 0 <= state.fence < self._fence:
                return False
            self._machines = dict(state.machines)
            self._evaluation = dict(state.evaluation)
            self._outbox.extend(state.outbox)
        if state.table is not None:
            self.publish_table(state.table)
        return True

    def outbox(self, count: int) -> list[bytes]:
        with self._lock:
            return self._outbox[:count]

    def trim_outbox(self, count: int) -> None:
        with self._lock:
            del self._outbox[:count]

    def epoch(self) -> str | None:
        return self._epoch or None

    def claim_epoch(self, epoch: str) -> bool:
        with self._lock:
            if self._epoch:
                return False
            self._epoch = epoch
            return True

    def impairments(self) -> list[tuple[float, float]]:
        with self._lock:
            return list(self._impairments.values())

    def add_impairment(self, source: str, spell: tuple[float, float]) -> None:
        with self._lock:
            self._impairments[source] = spell

    def config_version(self) -> int:
        return self._config_version

    def bump_config_version(self) -> None:
        with self._lock:
            self._config_version += 1

    def token_version(self) -> int:
        return self._token_version

    def bump_token_version(self) -> None:
        with self._lock:
            self._token_version += 1

    def incr(self, items: Iterable[tuple[str, float]]) -> None:
        with self._lock:
            for field, amount in items:
                self._counters[field] = self._counters.get(field, 0.0) + amount

    def counters(self) -> dict[str, float]:
        with self._lock:
            return dict(self._counters)

    def set_tick_info(self, info: Mapping[str, float]) -> None:
        with self._lock:
            self._tick.update(info)

    def tick_info(self) -> dict[str, float]:
        with self._lock:
            return dict(self._tick)
