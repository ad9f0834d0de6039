"""The dashboards' relay of table updates outlives quiet spells and channel-layer failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dashboard.livefeed import LiveFeed


class FlakyLayer:
    """A channel layer whose first receive fails the way redis-py's read timeout does."""

    def __init__(self) -> None:
        self.receives = 0
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def receive(self, channel: str) -> dict[str, Any]:
        self.receives += 1
        if self.receives == 1:
            raise TimeoutError("Timeout reading from localhost:6379")
        if self.receives == 2:
            return {"type": "table.update", "version": "v2"}
        await asyncio.Event().wait()  # nothing more
        raise AssertionError("unreachable")

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


def test_the_relay_keeps_relaying_after_a_failed_receive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dashboard.livefeed.RELAY_RETRY_S", 0.01)
    layer = FlakyLayer()

    async def run() -> None:
        task = asyncio.create_task(LiveFeed()._relay(layer, "channel"))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if layer.sent:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert layer.receives >= 2 and len(layer.sent) == 1


@pytest.mark.integration
def test_a_redis_layer_receive_outlasts_a_quiet_spell() -> None:
    """More than redis-py's default 5 s read timeout with nothing sent, then a message."""
    from channels_redis.core import RedisChannelLayer

    from trafficmgr import settings  # the project's, not this package's in-memory override

    layers = settings.CHANNEL_LAYERS["default"]
    if "RedisChannelLayer" not in layers["BACKEND"]:
        pytest.skip("the channel layer is in-process here (set REDIS_URL)")
    layer = RedisChannelLayer(**layers["CONFIG"])

    async def run() -> dict[str, Any]:
        channel = await layer.new_channel()
        waiting = asyncio.create_task(layer.receive(channel))
        await asyncio.sleep(6.5)
        assert not waiting.done(), waiting.exception() if waiting.done() else None
        await layer.send(channel, {"type": "table.update", "version": "v3"})
        message: dict[str, Any] = await asyncio.wait_for(waiting, 5)
        await layer.flush()
        return message

    assert asyncio.run(run())["version"] == "v3"
