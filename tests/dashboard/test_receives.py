"""A channel-layer receive that loses one cancellation still ends when the dashboard goes.

``StubbornLayer.receive`` behaves as channels_redis's over redis-py 8.1 when the
cancellation reaches it mid-reconnect: it swallows that cancellation and waits again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dashboard.livefeed import LiveFeed
from dashboard.receives import cancellable, stop


class StubbornLayer:
    """A channel layer whose receives lose the first cancellation; nothing is ever sent."""

    def __init__(self) -> None:
        self.swallowed = 0

    async def receive(self, channel: str) -> dict[str, Any]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.swallowed += 1
        await asyncio.Event().wait()  # a second cancellation does end it
        raise AssertionError("unreachable")

    async def new_channel(self) -> str:
        return "relay!x"

    async def group_add(self, group: str, channel: str) -> None:
        pass

    async def group_discard(self, group: str, channel: str) -> None:
        pass

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        pass


async def ends_within(task: asyncio.Future[Any], seconds: float) -> bool:
    done, _ = await asyncio.wait([task], timeout=seconds)
    return bool(done)


def test_a_plain_cancel_leaves_such_a_receive_running() -> None:
    """The stub does reproduce the hang: one cancel, and the task is still there."""

    async def run() -> None:
        layer = StubbornLayer()
        task = asyncio.ensure_future(layer.receive("c!1"))
        await asyncio.sleep(0)
        task.cancel()
        assert not await ends_within(task, 0.3)
        await stop(task)
        assert layer.swallowed == 1 and task.cancelled()

    asyncio.run(run())


def test_cancelling_the_consumers_receive_ends_it() -> None:
    async def run() -> None:
        layer = StubbornLayer()
        receive = cancellable(lambda: layer.receive("c!1"))
        task = asyncio.ensure_future(receive())
        await asyncio.sleep(0)
        task.cancel()  # once, as channels' await_many_dispatch does
        assert await ends_within(task, 1.0), "the receive outlived its cancellation"
        assert layer.swallowed == 1 and task.cancelled()
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    asyncio.run(run())


def test_the_last_dashboard_leaving_stops_the_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dashboard.livefeed.start_cursor", lambda: None)
    monkeypatch.setattr("dashboard.livefeed.period_s", lambda: 60.0)

    async def run() -> None:
        layer, feed = StubbornLayer(), LiveFeed()
        await feed.join(layer)
        await asyncio.sleep(0.05)
        assert feed.running
        await asyncio.wait_for(feed.leave(), 1.0)
        assert not feed.running and layer.swallowed == 1
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    asyncio.run(run())
