"""Swap the routing table under our server while dnsperf loads it, as the control loop does.

The server follows a table file (``--table-file``, polled every second); ``TableSwaps``
rewrites that file with a new table version every ``every_s`` seconds while a run lasts,
the first one as the run starts, so every measured second lies within ``every_s`` seconds
after a swap (with ``every_s`` at least the run's length: one swap, and the run measures the
seconds right after it). Each version is the plan's table with a new version string and
``generated_at`` (so a new SOA serial); ``moves`` of its (zone, model) lists also change
their weights, alternately: a list of several regions shifts 5 % of its weight from the
first to the last, a list of one region lends 5 % to the next region with an address.
``moves`` 0 is the control loop's common tick, a new version that routes nobody differently.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from bench.dns.geodns.plan import Plan
from trafficmgr.routing.table_json import table_to_json
from trafficmgr.routing.types import RoutingTable, WeightedRegion

SHIFT = 0.05


def write_table(path: Path, table: RoutingTable) -> None:
    """Write a table file so that the server reads the old file or the new one, never a part."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(table_to_json(table)))
    os.replace(temp, path)


def version_of(plan: Plan, n: int, moves: float, rng: random.Random) -> RoutingTable:
    """Return the plan's table as version ``n``, ``moves`` of its lists with moved weights."""
    base = plan.table
    others = plan.regions()
    zones: dict[str, dict[str, tuple[WeightedRegion, ...]]] = {}
    for zone, lists in base.zones.items():
        zones[zone] = {}
        for model, entries in lists.items():
            moved = n % 2 == 1 and entries and rng.random() < moves
            zones[zone][model] = _moved(entries, others) if moved else tuple(entries)
    return replace(base, version=f"swap-{n}", generated_at=time.time(), zones=zones)


def _moved(entries: tuple[WeightedRegion, ...], regions: list[str]) -> tuple[WeightedRegion, ...]:
    if len(entries) > 1:
        first, *middle, last = entries
        return (
            replace(first, weight=max(0.0, first.weight - SHIFT)),
            *middle,
            replace(last, weight=last.weight + SHIFT),
        )
    only = entries[0]
    names = [r for r in regions if r != only.region]
    if not names:
        return entries
    lent = WeightedRegion(names[0], SHIFT, "bench: weight moved")
    return (replace(only, weight=1.0 - SHIFT), lent)


class TableSwaps:
    """Rewrite the table file every ``every_s`` seconds from entering until leaving."""

    def __init__(self, plan: Plan, path: Path, every_s: float, moves: float = 0.0) -> None:
        self.plan = plan
        self.path = path
        self.every_s = every_s
        self.moves = moves
        self.swaps = 0
        self._rng = random.Random(7)
        self._version = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def initial(self) -> None:
        """Write the table the server starts with."""
        write_table(self.path, version_of(self.plan, 0, 0.0, self._rng))

    def __enter__(self) -> TableSwaps:
        if self.every_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="table-swaps", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            self._version += 1
            write_table(self.path, version_of(self.plan, self._version, self.moves, self._rng))
            self.swaps += 1
            if self._stop.wait(self.every_s):
                return
