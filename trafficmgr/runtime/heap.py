"""Keep the cyclic garbage collector's full collections off the latency-critical path.

Two dedicated processes use this: the DNS server (answers) and the Celery worker's control
loop (ticks). The DNS case, measured: a full (generation 2) collection walks every container
object in the process: in a serving process that is about 30,000 objects from startup alone
(modules, dnspython, the fleet, the GeoIP reader) plus what the caches hold (a location per
client prefix, rendered answers), and it ran for 4 to 17 ms of CPU on the benchmark machine,
during which no datagram is read: one such pause puts a few hundred queries past a 2 ms p99.
The answer path itself allocates almost nothing that lives (the tuples ``recvfrom`` returns
die at once), so what a full collection walks is nearly all objects that will live as long
as the process or the table.

So the serving process moves what has settled into the permanent generation
(``gc.freeze``), which collections skip; objects freed by reference counting are still freed
there, only cycles among them wait. ``settle`` does it once after startup; every
``freeze_every_s`` the objects made since (warmed caches, a new table) join them after a
collection that, skipping the frozen, walks only those and takes their garbage; so any
collection, automatic or this one, walks what was made in the last few seconds. A cycle
that becomes garbage after it was frozen (a closed TCP connection that was open for long, a
dropped Redis client) would wait for ever, so every ``full_every_s`` everything is thawed
and collected once, a pause of the old size, rare enough to stay far out of the tail
percentiles.

Only processes that do nothing but serve use this (``server.serve``); an embedding process
(the demo's thread) keeps its own collector settings.

The control loop: a tick builds a table of ~250 zones x 4 models and drops the previous one,
so objects reach the oldest generation every tick and every few ticks a full collection
walked the fleet, Django and two tables: 45-65 ms inside whichever phase it hit (p95 of a
2,000-endpoint tick 200-220 ms against a median of 134-158 ms). The worker calls ``tick``
between ticks (``controlloop.run_tick(keep_heap=True)``), after the table is published:
~6 ms to collect what the last tick made and freeze what survived, and no tick pays for
a full walk.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

FREEZE_EVERY_S = 10.0
FULL_EVERY_S = 900.0


class HeapKeeper:
    """Freezes the settled heap on a schedule and thaws it for a rare full collection."""

    def __init__(
        self,
        freeze_every_s: float = FREEZE_EVERY_S,
        full_every_s: float = FULL_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.freeze_every_s = freeze_every_s
        self.full_every_s = full_every_s
        self._clock = clock
        self._last_full = clock()
        self.freezes = 0
        self.full_collections = 0

    def settle(self) -> None:
        """Collect everything once, then freeze it (after startup: tables, zone, GeoIP)."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._last_full = self._clock()
        self.full_collections += 1
        self.freezes += 1

    def tick(self) -> None:
        """Freeze what was promoted since the last tick; thaw and collect all when it is time."""
        if self._clock() - self._last_full >= self.full_every_s:
            self.settle()
            return
        gc.collect()  # the frozen are skipped: this walks only what was made since
        gc.freeze()
        self.freezes += 1

    async def run(self) -> None:
        """Tick every ``freeze_every_s`` seconds, for ever."""
        while True:
            await asyncio.sleep(self.freeze_every_s)
            self.tick()
