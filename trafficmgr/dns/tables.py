"""The routing table the server answers from, kept fail-static (docs/architecture.md §5).

The current table lives in one ``Snapshot`` that is replaced by a single reference
assignment, so a query sees either the old table or the new one, never a mix. A new table
is written to the state file (temporary file, fsync, rename: a crash leaves the old file or
the new one, never half of one) by a background thread, so a slow disk never holds up
answers. On start the store answers, in order of preference, from the table file, the state
file, or the static table compiled from the fleet alone (residency applied), so there is an
answer from the first query on, and never an empty one because the control plane is late.

A table is refused, and the last good one kept, when it cannot be parsed or has no zones.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from trafficmgr.dns.metrics import Counters
from trafficmgr.routing.table import static_table, table_from_json, table_to_json
from trafficmgr.routing.types import Fleet, RoutingTable

log = logging.getLogger(__name__)

MAX_TABLE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One routing table as served, with what the hot path derives from it."""

    table: RoutingTable
    source: str  # static | state-file | table-file | redis | setter
    loaded_at: float
    serial: int  # SOA serial

    @property
    def version(self) -> str:
        return self.table.version


def make_snapshot(table: RoutingTable, source: str, now: float) -> Snapshot:
    return Snapshot(table, source, now, int(table.generated_at))


def parse_table(data: bytes | str) -> RoutingTable:
    """Parse a routing table JSON document; raise ValueError when it is not a usable table."""
    if len(data) > MAX_TABLE_BYTES:
        raise ValueError("routing table document too large")
    try:
        table = table_from_json(json.loads(data))
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"not a routing table: {exc!r}") from exc
    if not table.zones:
        raise ValueError("routing table has no zones")
    return table


class TableStore:
    """Holds the current snapshot, swaps it atomically and persists it."""

    def __init__(
        self,
        fleet: Fleet,
        counters: Counters,
        state_file: str | None = None,
        table_file: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._counters = counters
        self._clock = clock
        self.state_file = state_file
        self.table_file = table_file
        self.static = make_snapshot(static_table(fleet, clock()), "static", clock())
        self.snapshot = self.static
        self._lock = threading.Lock()
        self._pending: RoutingTable | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._last_write: Future[None] | None = None
        for path, source in ((state_file, "state-file"), (table_file, "table-file")):
            if path and os.path.exists(path):
                self.load_file(path, source, persist=False)

    def set_fleet(self, fleet: Fleet) -> None:
        """Recompile the static table for a new fleet (and serve it if nothing better came)."""
        static = make_snapshot(static_table(fleet, self._clock()), "static", self._clock())
        serving_static = self.snapshot is self.static
        self.static = static
        if serving_static:
            self.snapshot = static

    def set(self, table: RoutingTable, source: str, persist: bool = True) -> bool:
        """Serve ``table`` from now on; False when it is refused or already served."""
        if not table.zones:
            self._counters.add("table_rejected")
            log.warning("routing table %s from %s refused: no zones", table.version, source)
            return False
        if table.version == self.snapshot.version and self.snapshot is not self.static:
            return False
        self.snapshot = make_snapshot(table, source, self._clock())  # the atomic swap
        self._counters.add("table_swaps")
        log.info("serving routing table %s from %s", table.version, source)
        if persist and self.state_file and source != "state-file":
            self._persist(table)
        return True

    def load_file(self, path: str, source: str, persist: bool = True) -> bool:
        """Load a table from a JSON file; keep the current one when that fails."""
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_TABLE_BYTES + 1)
        except OSError as exc:
            self._counters.add("table_source_errors")
            log.warning("routing table file %s not read: %s", path, exc)
            return False
        try:
            table = parse_table(data)
        except ValueError as exc:
            self._counters.add("table_rejected")
            log.warning("routing table file %s not loaded: %s", path, exc)
            return False
        return self.set(table, source, persist=persist and path != self.state_file)

    def _persist(self, table: RoutingTable) -> None:
        """Queue ``table`` for writing; only the newest queued table is written."""
        with self._lock:
            self._pending = table
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="dns-table-writer")
            self._last_write = self._writer.submit(self._write_pending)

    def _write_pending(self) -> None:
        with self._lock:
            table, self._pending = self._pending, None
        if table is None or not self.state_file:
            return
        try:
            write_atomic(self.state_file, json.dumps(table_to_json(table)).encode())
        except OSError as exc:
            self._counters.add("table_persist_errors")
            log.warning("could not write routing table to %s: %s", self.state_file, exc)

    def flush(self) -> None:
        """Wait for queued writes to reach the disk."""
        with self._lock:
            last = self._last_write
        if last is not None:
            last.result()

    def close(self) -> None:
        """Finish queued writes and stop the writer thread."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    try:
        directory = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
