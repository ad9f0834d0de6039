"""Admission queues: requests wait a bounded time for a slot, interactive before batch.

When every endpoint that may take a request is at its admission limit (``regionview``), the
request waits here instead of being refused at once: interactive ones for up to their wait,
batch ones for a shorter one. A slot freed by a finishing request wakes the oldest
interactive waiter first, then the oldest batch one; waiters also look again every
``RECHECK_S`` (heartbeats may show room the process did not free itself). The queue is
bounded: when it is full an interactive arrival takes the place of the newest batch waiter
(batch is shed first), and any other arrival is refused. A refused or timed-out request gets
429 with ``Retry-After``.

Uses asyncio futures: call from the event loop that runs the front.
"""

from __future__ import annotations

import asyncio
from collections import deque

from trafficmgr.routing.types import Priority

RECHECK_S = 0.25


class AdmissionQueue:
    """Waiting requests per priority; ``wait`` returns False when the request is shed."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self._waiting: dict[Priority, deque[asyncio.Future[bool]]] = {
            Priority.INTERACTIVE: deque(),
            Priority.BATCH: deque(),
        }
        # the queues in waking order, held directly: every finished request wakes, and an
        # enum member hashes in Python code
        self._order = (self._waiting[Priority.INTERACTIVE], self._waiting[Priority.BATCH])
        self.shed_total = 0

    def depth(self, priority: Priority | None = None) -> int:
        """Return how many requests wait (of one priority, or all)."""
        if priority is not None:
            return len(self._waiting[priority])
        return sum(len(q) for q in self._waiting.values())

    def has_room(self, priority: Priority) -> bool:
        """Tell whether a request of ``priority`` may join the queue now."""
        if self.depth() < self.limit:
            return True
        return priority is Priority.INTERACTIVE and bool(self._waiting[Priority.BATCH])

    async def wait(self, priority: Priority, timeout_s: float) -> bool:
        """Wait until woken or ``timeout_s`` passes (True), or until shed (False)."""
        if not self.has_room(priority):
            return False
        if self.depth() >= self.limit:  # interactive arrival: the newest batch waiter goes
            shed = self._waiting[Priority.BATCH].pop()
            if not shed.done():
                shed.set_result(False)
            self.shed_total += 1
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        queue = self._waiting[priority]
        queue.append(future)
        try:
            return await asyncio.wait_for(asyncio.shield(future), min(timeout_s, RECHECK_S))
        except TimeoutError:
            return True  # look again: room may have appeared that nobody announced
        finally:
            if future in queue:
                queue.remove(future)
            if not future.done():
                future.cancel()

    def wake(self, count: int = 1) -> None:
        """Wake up to ``count`` waiters, interactive first, oldest first."""
        for queue in self._order:
            while count > 0 and queue:
                future = queue.popleft()
                if not future.done():
                    future.set_result(True)
                    count -= 1
            if count <= 0:
                return
