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

A partition is not a refusal: a Redis that accepts and never answers, or a subscription
whose peer went silent, sends no error and no end of file. Every command therefore has a
read timeout (``READ_TIMEOUT_S``), and a subscriber that heard nothing for ``IDLE_CHECK_S``
reads the published table's version (a few bytes): a partition then fails that read within
the timeout and the source reconnects, and an update whose message was lost is fetched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any

from trafficmgr.contracts import TABLE_REDIS_CHANNEL, TABLE_REDIS_KEY, TABLE_VERSION_KEY, redis_key
from trafficmgr.dns.metrics import Counters
from trafficmgr.dns.tables import TableStore, parse_table

log = logging.getLogger(__name__)

REDIS_KEY = TABLE_REDIS_KEY
REDIS_CHANNEL = TABLE_REDIS_CHANNEL
REDIS_VERSION_KEY = redis_key(TABLE_VERSION_KEY)  # the published table's version alone
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 2.0
CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 2.0  # a table of ~1 MB crosses a LAN in milliseconds
IDLE_CHECK_S = 5.0


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
        self._version: bytes | None = None  # the version key as last read with the table

    async def run(self) -> None:
        """Subscribe, fetch, follow updates; on any failure wait and start over, forever."""
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        backoff = BACKOFF_FIRST_S
        while True:
            client: Any = aioredis.from_url(
                self.url,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=READ_TIMEOUT_S,
                health_check_interval=IDLE_CHECK_S,
            )
            try:
                pubsub = client.pubsub()
                await pubsub.subscribe(REDIS_CHANNEL)
                await self._fetch(client)
                self.connected = True
                backoff = BACKOFF_FIRST_S
                await self._follow(client, pubsub)
            except (TimeoutError, RedisError, OSError) as exc:
                self.counters.add("redis_errors")
                log.warning("redis table source %s: %s; retrying in %.1f s", self.url, exc, backoff)
            finally:
                self.connected = False
                await _close(client)
            await asyncio.sleep(retry_delay(backoff))
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _follow(self, client: Any, pubsub: Any) -> None:
        """Fetch the table on every message; after ``IDLE_CHECK_S`` of silence, check."""
        while True:
            message = await pubsub.get_message(timeout=IDLE_CHECK_S)
            if message is None:
                version = await client.get(REDIS_VERSION_KEY)  # times out in a partition
                if version is not None and version != self._version:
                    await self._fetch(client)
            elif message.get("type") == "message":
                await self._update(client, message.get("data"))

    async def _fetch(self, client: Any) -> None:
        self._version = await client.get(REDIS_VERSION_KEY)
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
