"""The dashboard's WebSocket: a snapshot on connect, then group messages forwarded as they are.

The control loop's ``dashboard`` group reaches each page through this process's live feed
(``dashboard.livefeed``), which relays every message as JSON encoded once; so does the
per-tick live state. Close codes: 4401 not signed in, 4403 signed in without a dashboard
role; the page goes to the login page on either instead of reconnecting. The consumer's
channel-layer receive ends when channels cancels it (``dashboard.receives``): else one
lost cancellation keeps a stopping uvicorn worker waiting for its whole graceful timeout.

What a page sends is checked by ``dashboard.inbound`` before anything acts on it: a bad frame
is answered with an ``error`` message and never ends the socket, except one too large (1009)
or one problem too many (1008). The handshake's Origin is checked by ``dashboard.origin``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard import inbound, messages
from dashboard.livefeed import feed
from dashboard.receives import cancellable
from regions.access.permissions import role_of

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    joined: bool = False
    closing: bool = False
    problems: int = 0
    snapshot_at: float = float("-inf")

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
        self.snapshot_at = time.monotonic()

    async def disconnect(self, code: int) -> None:
        if self.joined:
            self.joined = False
            await self.channel_layer.group_discard(feed.group, self.channel_name)
            await feed.leave()

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Check a frame, then answer it; nothing a page sends may end the handler."""
        if not self.joined or self.closing:  # refused, or closed for what it sent
            return
        found = inbound.read(text_data, bytes_data)
        if isinstance(found, inbound.Problem):
            await self.refuse(found)
            return
        try:
            await self.answer(found)
        except Exception:  # e.g. the database away for a snapshot: say so, keep the socket
            log.exception("could not answer a dashboard's %s message", found.type)
            await self.refuse(
                inbound.Problem("unavailable", "could not answer", "type", id=found.id)
            )

    async def answer(self, request: inbound.Request) -> None:
        if request.type == "ping":
            await self.send_json({"type": "pong", "id": request.id, "server_time": time.time()})
            return
        wait = self.snapshot_at + inbound.SNAPSHOT_EVERY_S - time.monotonic()
        if wait > 0:
            detail = f"one snapshot per {inbound.SNAPSHOT_EVERY_S:g} s: retry in {wait:.1f} s"
            await self.refuse(inbound.Problem("too_frequent", detail, "type", id=request.id))
            return
        self.snapshot_at = time.monotonic()
        user = self.scope.get("user")
        await self.send_json(await database_sync_to_async(messages.snapshot_message)(user))

    async def refuse(self, problem: inbound.Problem) -> None:
        """Answer a bad message with an error; close on a size, or on one problem too many."""
        self.problems += 1
        await self.send_json(problem.doc())
        code = problem.close
        if code is None and self.problems >= inbound.MAX_PROBLEMS:
            code = inbound.CLOSE_POLICY
        if code is not None:
            self.closing = True
            await self.close(code=code)

    async def relay_text(self, message: dict[str, Any]) -> None:
        await self.send(text_data=message["text"])
