"""A timeout whose deadline moves with activity, checked by one shared tick, not a timer each.

``asyncio.timeout`` arms a timer per block and re-arms it on every ``reschedule``: under
uvloop a timer started and stopped costs several µs, a request has one block per attempt
and a stream relay would reschedule once per chunk (one per token). ``Deadline`` arms none:
entering a block adds it to its loop's ``DeadlineClock``, ``touch()`` only notes the time,
and leaving takes it out again (a dictionary insert and delete). The clock runs one tick every
``TICK_S`` while any block is open and expires those whose ``last touch + idle`` has passed:
the task is cancelled and, as with ``asyncio.timeout``, the cancellation leaves the block as
``TimeoutError``; anyone else's cancellation stays a cancellation.

A deadline fires between ``idle`` and ``idle + TICK_S`` after the last touch. The gateway's
timeouts are seconds (connect, first byte, a stalled stream): 20 ms late is nothing to them,
and a tick scans the open blocks (a thousand streams: about 50 µs a tick).
"""

from __future__ import annotations

import asyncio
from types import TracebackType

TICK_S = 0.02


class DeadlineClock:
    """The open ``Deadline`` blocks of one loop, and the tick that expires them."""

    __slots__ = ("_handle", "_open", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._open: dict[Deadline, None] = {}  # an ordered set
        self._handle: asyncio.TimerHandle | None = None

    def add(self, deadline: Deadline) -> None:
        self._open[deadline] = None
        if self._handle is None:
            self._handle = self.loop.call_later(TICK_S, self._tick)

    def discard(self, deadline: Deadline) -> None:
        self._open.pop(deadline, None)

    def _tick(self) -> None:
        now = self.loop.time()
        due = [d for d in self._open if now >= d.touched + d.idle_s]
        for deadline in due:
            del self._open[deadline]
            deadline._expire()
        self._handle = self.loop.call_later(TICK_S, self._tick) if self._open else None

    def open_blocks(self) -> int:
        """Return how many blocks are open (not yet left, not yet expired)."""
        return len(self._open)


class Deadline:
    """``with Deadline(s):`` (in a task) raise TimeoutError when ``s`` pass without a
    ``touch()``. A plain ``with``, not ``async with`` as ``asyncio.timeout``: nothing here
    awaits, and it is a coroutine frame fewer on each side of the block.

    ``clock``: a ``DeadlineClock`` of the running loop, shared by the caller's blocks (the
    proxy holds one); without it the block has a clock of its own."""

    __slots__ = ("_cancelling", "_clock", "_expired", "_task", "idle_s", "touched")

    def __init__(self, idle_s: float, clock: DeadlineClock | None = None) -> None:
        self.idle_s = idle_s
        self._clock = clock if clock is not None else DeadlineClock(asyncio.get_running_loop())
        self.touched = self._clock.loop.time()
        self._task: asyncio.Task[object] | None = None
        self._expired = False
        self._cancelling = 0

    def touch(self) -> None:
        """Note activity: the deadline is now ``idle_s`` from here."""
        self.touched = self._clock.loop.time()

    def __enter__(self) -> Deadline:
        task = asyncio.current_task(self._clock.loop)
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        self._clock.add(self)
        return self

    def _expire(self) -> None:
        self._expired = True
        assert self._task is not None
        self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        if not self._expired or task is None:
            self._clock.discard(self)
            return
        # the cancellation was ours: take it back whatever ended the block
        if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc
