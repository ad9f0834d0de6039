"""Follow the table published in Redis from a thread: ``RedisHotState.follow_tables``.

The store's own clients never block (``redis_client``), so a follower holds a connection of
its own. The pub/sub message is only a cue (it may be another deployment's, see
``trafficmgr.dns.sources``): the table handed on is always the one read back from this
store's key, and only when its version changed. A follower that heard nothing for
``IDLE_CHECK_S`` reads the version anyway, so a lost message costs at most that long; when
Redis goes away it retries with capped backoff and the listener keeps its last table.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import RedisError

from trafficmgr.contracts import TABLE_CHANNEL_SUFFIX, TABLE_KEY, TABLE_VERSION_KEY, redis_key
from trafficmgr.routing.table import table_from_json
from trafficmgr.routing.types import RoutingTable

log = logging.getLogger(__name__)

IDLE_CHECK_S = 1.0
TIMEOUT_S = 2.0
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 2.0

TableListener = Callable[[RoutingTable], None]


class TableFollower:
    """A daemon thread handing every new table in Redis to ``listener``."""

    def __init__(self, url: str, prefix: str, listener: TableListener) -> None:
        self.url = url
        self.listener = listener
        self.channel = redis_key(TABLE_CHANNEL_SUFFIX, prefix)
        self.table_key = redis_key(TABLE_KEY, prefix)
        self.version_key = redis_key(TABLE_VERSION_KEY, prefix)
        self._version: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="table-follower", daemon=True)

    def start(self) -> TableFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following; returns once the thread ended (at most ``IDLE_CHECK_S`` later)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(IDLE_CHECK_S + TIMEOUT_S)

    def _run(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._stop.is_set():
            client: Any = redis.Redis.from_url(
                self.url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
            )
            try:
                self._follow(client)
                return
            except (RedisError, OSError, ValueError) as exc:
                log.warning("following the table in Redis: %s; retrying in %.2f s", exc, backoff)
            finally:
                client.close()
            self._stop.wait(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _follow(self, client: Any) -> None:
        """Subscribe, then read the table (an update between the two is not missed), then
        re-read it on every cue and after every quiet ``IDLE_CHECK_S``, until stopped."""
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self.channel)
            self._check(client)
            while not self._stop.is_set():
                pubsub.get_message(timeout=IDLE_CHECK_S)
                self._check(client)
        finally:
            pubsub.close()

    def _check(self, client: Any) -> None:
        raw_version = client.get(self.version_key)
        version = raw_version.decode() if isinstance(raw_version, bytes) else raw_version
        if version is None or version == self._version:
            return
        raw = client.get(self.table_key)
        if not raw:
            return
        table = table_from_json(json.loads(raw))
        self._version = version
        self.listener(table)
