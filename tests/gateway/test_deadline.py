"""``Deadline`` behaves as a rescheduled ``asyncio.timeout``: it fires ``idle`` (at most a tick
late) after the last touch, turns its own cancellation into TimeoutError, and leaves anyone
else's alone; blocks sharing a clock expire each on its own time."""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop

from trafficmgr.gateway.deadline import TICK_S, Deadline, DeadlineClock


def run(coro_fn):  # type: ignore[no-untyped-def]
    return uvloop.run(coro_fn())


def test_it_fires_after_the_idle_time_without_a_touch() -> None:
    async def main() -> float:
        began = time.monotonic()
        with pytest.raises(TimeoutError), Deadline(0.1):
            await asyncio.sleep(5)
        return time.monotonic() - began

    assert 0.09 <= run(main) < 1.0


def test_touches_move_the_deadline() -> None:
    async def main() -> tuple[float, int]:
        began, ticks = time.monotonic(), 0
        with pytest.raises(TimeoutError), Deadline(0.1) as deadline:
            for _ in range(6):  # 0.3 s of activity, each gap under the idle time
                await asyncio.sleep(0.05)
                deadline.touch()
                ticks += 1
            await asyncio.sleep(5)  # then silence
        return time.monotonic() - began, ticks

    elapsed, ticks = run(main)
    assert ticks == 6
    assert 0.39 <= elapsed < 1.5  # the last touch (0.3 s) plus the idle time


def test_a_block_that_ends_in_time_is_untouched() -> None:
    async def main() -> str:
        with Deadline(0.2):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the timer is gone: nothing cancels this
        return "done"

    assert run(main) == "done"


def test_someone_elses_cancellation_stays_a_cancellation() -> None:
    async def inner() -> None:
        with Deadline(5):
            await asyncio.sleep(5)

    async def main() -> bool:
        task = asyncio.ensure_future(inner())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert run(main)


def test_a_shared_clock_expires_each_block_on_its_own_time() -> None:
    async def guarded(clock: DeadlineClock, idle: float, work: float) -> str:
        try:
            with Deadline(idle, clock):
                await asyncio.sleep(work)
        except TimeoutError:
            return "timed out"
        return "done"

    async def main() -> tuple[list[str], int, bool]:
        clock = DeadlineClock(asyncio.get_running_loop())
        results = await asyncio.gather(
            guarded(clock, 0.1, 5),  # expires
            guarded(clock, 5, 0.05),  # ends in time
            guarded(clock, 0.2, 5),  # expires later
            guarded(clock, 0.3, 0.1),  # ends in time
        )
        await asyncio.sleep(2 * TICK_S)
        return list(results), clock.open_blocks(), clock._handle is None

    results, still_open, idle = run(main)
    assert results == ["timed out", "done", "timed out", "done"]
    assert still_open == 0  # every block left or expired is forgotten
    assert idle  # and with none open the tick stops


def test_a_deadline_fires_at_most_one_tick_late() -> None:
    async def main() -> float:
        clock = DeadlineClock(asyncio.get_running_loop())
        began = time.monotonic()
        with pytest.raises(TimeoutError), Deadline(0.15, clock):
            await asyncio.sleep(5)
        return time.monotonic() - began

    assert 0.14 <= run(main) < 0.15 + TICK_S + 0.2  # the loop clock counts ms; slack for load
