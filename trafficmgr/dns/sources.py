"""Where new routing tables come from: a watched file and Redis pub/sub.

Both run as asyncio tasks next to the listeners and only ever call ``TableStore.set`` (or
``load_file``); when a source fails, the store keeps serving the last good table.

Redis: the control plane keeps the current table's JSON under ``trafficmgr:table`` and
publishes on ``trafficmgr:table:updates`` when it changes. The message is only ever a cue:
Redis pub/sub ignores database indexes, so a message may come from another deployment sharing
the server, and the table served is always the one read back from this database's key. The
subscriber reads the key after it has
subscribed, so an update between the two is not missed, and reconnects with jittered
exponential backoff capped at ``BACKOFF_MAX_S`` (2 s) when Redis goes away: a server keeps
answering from its last table meanwhile, and follows the table again within about that long
after Redis returns (the reconnect re-reads the key at once). A handful of DNS servers
retrying every 2 s is nothing for Redis; a long cap only kept them on a stale table.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any

from trafficmgr.dns.metrics import Counters
from trafficmgr.dns.tables import TableStore, parse_table

log = logging.getLogger(__name__)

REDIS_KEY = "trafficmgr:table"
REDIS_CHANNEL = "trafficmgr:table:updates"
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 2.0


def _file_stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


async def watch_file(store: TableStore, path: str, interval_s: float = 1.0) -> None:
    """Load ``path`` whenever it changes (polled: works on every filesystem, no extra deps).

    The first poll loads the file whatever its stamp, so a change made between the store's
    first load and this task's start is not missed (reloading the same version is a no-op).
    """
    seen: tuple[int, int, int] | None = None
    while True:
        await asyncio.sleep(interval_s)
        stamp = _file_stamp(path)
        if stamp is None or stamp == seen:
            continue
        seen = stamp
        store.load_file(path, "table-file")


class RedisSource:
    """Follows the table in Redis; ``connected`` tells whether it is subscribed right now."""

    def __init__(self, url: str, store: TableStore, counters: Counters) -> None:
        self.url = url
        self.store = store
        self.counters = counters
        self.connected = False

    async def run(self) -> None:
        """Subscribe, fetch, follow updates; on any failure wait and start over, forever."""
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        backoff = BACKOFF_FIRST_S
        while True:
            client: Any = aioredis.from_url(
                self.url, socket_connect_timeout=2.0, health_check_interval=5
            )
            try:
                pubsub = client.pubsub()
                await pubsub.subscribe(REDIS_CHANNEL)
                self.connected = True
                await self._fetch(client)
                backoff = BACKOFF_FIRST_S
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        await self._update(client, message.get("data"))
            except (TimeoutError, RedisError, OSError) as exc:
                self.counters.add("redis_errors")
                log.warning("redis table source %s: %s; retrying in %.1f s", self.url, exc, backoff)
            finally:
                self.connected = False
                await _close(client)
            await asyncio.sleep(retry_delay(backoff))
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _fetch(self, client: Any) -> None:
        data = await client.get(REDIS_KEY)
        if data is not None:
            self._accept(data)

    async def _update(self, client: Any, data: Any) -> None:
        """Re-read this database's key: the message may be another deployment's table."""
        await self._fetch(client)

    def _accept(self, data: bytes | str) -> bool:
        try:
            table = parse_table(data)
        except ValueError as exc:
            self.counters.add("table_rejected")
            log.warning("redis table refused: %s", exc)
            return False
        self.store.set(table, "redis")
        return True


def retry_delay(backoff: float) -> float:
    """The wait before reconnecting: ``backoff`` jittered by ±20 %, never past the cap's."""
    return min(BACKOFF_MAX_S * 1.2, backoff * random.uniform(0.8, 1.2))


async def _close(client: Any) -> None:
    try:
        await client.aclose()
    except Exception:  # closing a broken connection may fail in many ways; none matter
        log.debug("closing redis client failed", exc_info=True)
