"""Channel-layer receives that end when cancelled, so that a web worker can stop.

redis-py 8.1's asyncio client can lose a cancellation that reaches a task while its
connection is being set up (``Connection.connect`` returns normally, the task's
``cancelling()`` still 1), and channels_redis's ``receive`` then runs BZPOPMIN after
BZPOPMIN (each returning nothing after 5 s) for good. A dashboard's receive meets that at
every shutdown: the relay's cancelled BZPOPMIN drops the shared connection, the next
receiver reconnects, and its own cancellation arrives mid-handshake. channels waits for the
cancelled receive, uvicorn for the consumer, and SIGTERM ends in uvicorn's graceful-shutdown
timeout, then SIGKILL. A cancellation repeated until the task has ended does end it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

RECANCEL_S = 0.1  # between cancellations of a task that is still running


async def stop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` until it has ended (one cancellation may be lost, see above)."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=RECANCEL_S)
    if not task.cancelled():
        with contextlib.suppress(Exception):  # ended on its own: nobody wants the outcome
            task.result()


def cancellable(receive: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """Wrap a channel-layer receive so that cancelling the wrapper ends the receive."""

    async def receive_until_cancelled() -> Any:
        task = asyncio.ensure_future(receive())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await stop(task)
            raise

    return receive_until_cancelled
