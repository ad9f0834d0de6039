"""The live feed: one per web process, running while dashboards are connected to it.

It does two things, once per process rather than once per browser:

- **Relay.** It subscribes one channel to the ``dashboard`` group, where the control loop
  sends ``table.update`` (and anyone else may send), encodes each message to JSON once and
  hands the text to this process's dashboards through a process-local group. A group of N
  browsers would otherwise cost N copies (in-memory layer) or N Redis deliveries per message.
- **Ticks.** The loop sends ``table.update`` only when the table's version changes, but GPU
  figures, queues and events move on every tick. Every half tick the feed reads the hot
  state's evaluation (one read); when a new tick has run it sends ``live.update`` and the
  events written since (``events.new``); after a configuration write, ``config.update``.
  While a drill is under way, and whenever a drill event was written, it reads the drills and
  their progress (``dashboard.drillfeed``) and sends ``drills.update`` when they changed.
  When the loop stops, nothing is sent and the pages show their "stale" banner.

The browser never polls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from dashboard import drillfeed, messages
from dashboard.receives import stop
from regions import hotstate
from regions.loop.history import DASHBOARD_GROUP

log = logging.getLogger(__name__)

RELAY_TYPE = "relay.text"
RELAY_RETRY_S = 0.5  # between receive attempts after a channel-layer failure


@dataclass(slots=True)
class Cursor:
    """What the feed already sent: the tick, the last event id, the config version, and the
    drills (whether one is under way, and their last document)."""

    tick_at: float | None
    event_id: int
    config_version: int
    drills_active: bool = False
    drills_sent: dict[str, Any] | None = None


def start_cursor() -> Cursor:
    store = hotstate.get()
    cursor = Cursor(store.evaluation().get("at"), messages.last_event_id(), store.config_version())
    doc = drillfeed.drills_doc()
    cursor.drills_active, cursor.drills_sent = bool(doc["active"]), doc
    return cursor


def drill_step(cursor: Cursor, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The drills' message, when a drill is under way or a drill event came, and it changed.

    The drills under way are read each time (their progress moves every half second); the last
    ones, with their reports, only when a drill event came or a drill stopped being under way.
    """
    drill_events = any(e.get("kind") == "drill" for e in events)
    if not cursor.drills_active and not drill_events:
        return []
    active = drillfeed.active_docs()
    sent = cursor.drills_sent or {"active": [], "recent": []}
    same_drills = [d["id"] for d in active] == [d["id"] for d in sent["active"]]
    recent = sent["recent"] if same_drills and not drill_events else drillfeed.recent_docs()
    doc = {"active": active, "recent": recent}
    cursor.drills_active = bool(active)
    if doc == cursor.drills_sent:
        return []
    cursor.drills_sent = doc
    return [{"type": "drills.update", **doc}]


def step(cursor: Cursor) -> list[dict[str, Any]]:
    """Return the messages a new tick or configuration calls for (and advance the cursor)."""
    store = hotstate.get()
    out: list[dict[str, Any]] = []
    version = store.config_version()
    config_changed = version != cursor.config_version
    if config_changed:
        cursor.config_version = version
        out.append(messages.config_message())
    evaluation = store.evaluation()
    at = evaluation.get("at")
    ticked = at is not None and at != cursor.tick_at
    if ticked:
        cursor.tick_at = at
        out.append(messages.live_message(evaluation))
    events: list[dict[str, Any]] = []
    if ticked or config_changed:
        events = messages.events_after(cursor.event_id)
        if events:
            cursor.event_id = int(events[-1]["id"])
            out.append({"type": "events.new", "events": events})
    return out + drill_step(cursor, events)


def period_s() -> float:
    return max(0.1, min(1.0, messages.tick_seconds() / 2))


def relayed(message: dict[str, Any]) -> dict[str, Any]:
    """Wrap a browser message as its JSON text, encoded once for every local dashboard."""
    return {"type": RELAY_TYPE, "text": json.dumps(message)}


class LiveFeed:
    """Relay and ticks for this process's dashboards (see the module docstring)."""

    def __init__(self) -> None:
        self.group = f"dashboard-local.{uuid.uuid4().hex[:16]}"
        self.clients = 0
        self._layer: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel: str | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def running(self) -> bool:
        return any(not t.done() for t in self._tasks)

    async def join(self, layer: Any) -> None:
        """Count a dashboard; the first one subscribes the relay before returning."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop or layer is not self._layer:  # tests: a loop/layer per test
            self._loop, self._layer, self._tasks, self.clients = loop, layer, [], 0
        self.clients += 1
        if self.running:
            return
        self._channel = await layer.new_channel()
        await layer.group_add(DASHBOARD_GROUP, self._channel)
        self._tasks = [
            loop.create_task(self._relay(layer, self._channel), name="dashboard-relay"),
            loop.create_task(self._ticks(layer), name="dashboard-ticks"),
        ]

    async def leave(self) -> None:
        """Count a dashboard gone; the last one stops the feed (and waits until it has)."""
        self.clients = max(0, self.clients - 1)
        if self.clients or not self._tasks:
            return
        # Taken now: a dashboard joining meanwhile starts a feed of its own.
        tasks, self._tasks = self._tasks, []
        channel, self._channel = self._channel, None
        await asyncio.gather(*(stop(task) for task in tasks))
        if channel is not None and self._layer is not None:
            await self._layer.group_discard(DASHBOARD_GROUP, channel)

    async def _relay(self, layer: Any, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis away or slow: the relay outlives it, else tables stop
                log.exception("dashboard relay could not receive; retrying")
                await asyncio.sleep(RELAY_RETRY_S)
                continue
            try:
                await layer.group_send(self.group, relayed(message))
            except Exception:  # one bad message must not end the relay
                log.exception("could not relay a %s message", message.get("type"))

    async def _ticks(self, layer: Any) -> None:
        cursor = await database_sync_to_async(start_cursor)()
        while True:
            await asyncio.sleep(period_s())
            try:
                for message in await database_sync_to_async(step)(cursor):
                    await layer.group_send(self.group, relayed(message))
            except asyncio.CancelledError:
                raise
            except Exception:  # a database or Redis hiccup must not end the feed
                log.exception("dashboard live feed step failed")


feed = LiveFeed()
