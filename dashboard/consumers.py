"""The dashboard's WebSocket: a snapshot on connect, then group messages forwarded as they are.

The control loop's ``dashboard`` group reaches each page through this process's live feed
(``dashboard.livefeed``), which relays every message as JSON encoded once; so does the
per-tick live state. Close codes: 4401 not signed in, 4403 signed in without a dashboard
role; the page goes to the login page on either instead of reconnecting. The consumer's
channel-layer receive ends when channels cancels it (``dashboard.receives``): else one
lost cancellation keeps a stopping uvicorn worker waiting for its whole graceful timeout.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard import messages
from dashboard.livefeed import feed
from dashboard.receives import cancellable
from regions.access.permissions import role_of

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    joined: bool = False

    # channels sets this to the layer's receive of the consumer's channel, then awaits it
    # next to the socket's receive and cancels it once the socket is gone.
    @property
    def channel_receive(self) -> Callable[[], Awaitable[Any]]:
        return self._channel_receive

    @channel_receive.setter
    def channel_receive(self, receive: Callable[[], Awaitable[Any]]) -> None:
        self._channel_receive = cancellable(receive)

    async def connect(self) -> None:
        user = self.scope.get("user")
        # Accept first so that the browser sees the close code (a refused handshake is 1006).
        await self.accept()
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if await database_sync_to_async(role_of)(user) is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Join before the snapshot so that nothing published in between is lost.
        await self.channel_layer.group_add(feed.group, self.channel_name)
        self.joined = True
        await feed.join(self.channel_layer)
        await self.send_json(await database_sync_to_async(messages.snapshot_message)(user))

    async def disconnect(self, code: int) -> None:
        if self.joined:
            self.joined = False
            await self.channel_layer.group_discard(feed.group, self.channel_name)
            await feed.leave()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The page only listens; anything it sends is ignored."""

    async def relay_text(self, message: dict[str, Any]) -> None:
        await self.send(text_data=message["text"])
