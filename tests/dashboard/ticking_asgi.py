"""The real ASGI app plus an in-process control loop and static files: what the browser
tests serve when ``manage.py demo`` cannot (``daphne tests.dashboard.ticking_asgi:application``).

The loop runs as a task of the server's own event loop, each tick in a worker thread, so the
control loop's ``group_send`` reaches the in-memory channel layer from inside that loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.routing import ProtocolTypeRouter
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from trafficmgr.asgi import application as app

log = logging.getLogger(__name__)

_inner = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(app.application_mapping["http"]),
        "websocket": app.application_mapping["websocket"],
    }
)
_loop_task: asyncio.Task[None] | None = None


async def _tick_forever() -> None:
    from regions.loop import control as controlloop

    interval = controlloop.tick_seconds()
    while True:
        try:
            await sync_to_async(controlloop.run_tick, thread_sensitive=False)()
        except Exception:
            log.exception("tick failed")
        await asyncio.sleep(interval)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _loop_task
    if _loop_task is None:
        _loop_task = asyncio.get_running_loop().create_task(_tick_forever())
    await _inner(scope, receive, send)
