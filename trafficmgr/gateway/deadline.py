"""A timeout whose deadline moves with activity without re-arming a timer each time.

``asyncio.timeout`` re-arms its timer on every ``reschedule``: under uvloop that is a timer
stopped and started again, about 7 µs, and a stream relay reschedules once per chunk (one per
token). ``Deadline`` keeps one timer: ``touch()`` only notes the time, and when the timer
fires it checks the last touch and sleeps again until ``last touch + idle``. The timer
therefore fires at exactly the same moment as a rescheduled ``asyncio.timeout`` would, and,
as there, the task is cancelled and the cancellation leaves the block as ``TimeoutError``.
Without touches it is a plain timeout that costs one timer (``asyncio.timeout`` also builds
and schedules a handle per entry, about twice the cost).
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Deadline:
    """``async with Deadline(s):`` raise TimeoutError when ``s`` pass without a ``touch()``.

    ``loop``: the running loop, when the caller holds it (asking asyncio for it costs a
    ``getpid`` system call each time)."""

    __slots__ = ("_cancelling", "_expired", "_handle", "_loop", "_task", "idle_s", "touched")

    def __init__(self, idle_s: float, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.idle_s = idle_s
        self._loop = loop or asyncio.get_running_loop()
        self.touched = self._loop.time()
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expired = False
        self._cancelling = 0

    def touch(self) -> None:
        """Note activity: the deadline is now ``idle_s`` from here."""
        self.touched = self._loop.time()

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task(self._loop)
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        self._handle = self._loop.call_at(self.touched + self.idle_s, self._fire)
        return self

    def _fire(self) -> None:
        due = self.touched + self.idle_s
        if self._loop.time() < due:  # touched since the timer was set: wait the rest
            self._handle = self._loop.call_at(due, self._fire)
            return
        self._handle = None
        self._expired = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task = self._task
        if not self._expired or task is None:
            return
        # the cancellation was ours: take it back whatever ended the block
        if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc
