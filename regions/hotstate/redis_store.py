"""The Redis hot state of the distributed mode (keys: see ``trafficmgr.contracts``).

What a Redis restart must not cost: counters summed here are kept until Redis took them
(a flush that fails keeps them pending), and this process's spells of failing to reach
Redis are handed over once it answers again (``regions.hotstate.impairment``). The store is
one class assembled from its concerns: heartbeats (``redis_heartbeats``), the tick lease
with its fencing token (``redis_tick``), and here the loop state, the table, the drill
mailbox, the completion streams, versions and counters. Its two connections (short timeouts
for request paths, longer replies for the loop's writes, one breaker) are ``redis_client``'s.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
from redis.exceptions import RedisError

from regions.conf import HOTSTATE_TIMEOUT_DEFAULT_S
from regions.hotstate import redis_client, scripts
from regions.hotstate.redis_follow import TableFollower
from regions.hotstate.redis_heartbeats import RedisHeartbeats
from regions.hotstate.redis_tick import RedisTickLease
from trafficmgr.contracts import (
    COMPLETIONS_MAXLEN,
    PREFIX,
    TABLE_CHANNEL_SUFFIX,
    Completion,
    StreamEntry,
    decode_completions,
    encode_completion,
    json_bytes,
    machine_from_doc,
    machine_to_doc,
)
from trafficmgr.routing.failover import RegionMachine
from trafficmgr.routing.table import table_from_json, table_to_json
from trafficmgr.routing.types import Heartbeat, RoutingTable

# Readers on the hot paths (every decision, every heartbeat) check these versions at most
# this often: a configuration change or a new table reaches them within it.
VERSION_CHECK_S = 0.2
# Counters are summed in process and written at most this often (and at exit).
FLUSH_S = 0.5


def _loads(raw: str | bytes) -> Any:
    """Parse JSON fast; documents written with NaN or Infinity still parse (slowly)."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


class RedisHotState(RedisHeartbeats, RedisTickLease):
    """The shared store of the distributed mode."""

    def __init__(
        self, url: str, prefix: str = PREFIX, timeout_s: float = HOTSTATE_TIMEOUT_DEFAULT_S
    ) -> None:
        # One breaker, two clients: request paths give up after ``timeout_s``, the loop's
        # writes wait longer for Redis to answer (``redis_client``).
        self.breaker = redis_client.ProbingBreaker(redis_client.RETRY_S, probe_s=timeout_s)
        self.redis = redis_client.connect(url, timeout_s, timeout_s, self.breaker)
        self.loop_redis = redis_client.connect(
            url, timeout_s, max(timeout_s, redis_client.LOOP_READ_TIMEOUT_S), self.breaker
        )
        self.prefix = prefix
        self.url = url
        self._put = self.redis.register_script(scripts.PUT_HEARTBEAT_LUA)
        self._release = self.loop_redis.register_script(scripts.RELEASE_LUA)
        self._acquire = self.loop_redis.register_script(scripts.ACQUIRE_LUA)
        self._renew = self.loop_redis.register_script(scripts.RENEW_LUA)
        self._save_tick = self.loop_redis.register_script(scripts.SAVE_TICK_LUA)
        self._cached_table: RoutingTable | None = None
        self._table_checked = 0.0
        # Heartbeats decoded before, by endpoint: (stored JSON, heartbeat); reused while the
        # stored JSON is the same.
        self._beats: dict[str, tuple[str, Heartbeat]] = {}
        self._lean_beats: dict[str, tuple[str, Heartbeat]] = {}  # the same, histograms left out
        self._evaluation: tuple[str, dict[str, Any]] | None = None  # (stamp, document)
        self._config: tuple[float, int] | None = None  # (checked at, version)
        self._tokens: tuple[float, int] | None = None
        self._pending: dict[str, float] = {}
        self._pending_lock = threading.Lock()
        self._flushed = time.monotonic()
        self._flusher_pid = 0
        atexit.register(self._flush_quietly)

    def key(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def reset(self) -> None:
        keys = list(self.loop_redis.scan_iter(match=f"{self.prefix}:*", count=1000))
        if keys:
            self.loop_redis.delete(*keys)
        self._cached_table = None
        self._beats, self._lean_beats = {}, {}
        self._evaluation = None
        self._config = None
        self._tokens = None
        with self._pending_lock:
            self._pending.clear()

    def machines(self) -> dict[str, RegionMachine]:
        raw = self.redis.get(self.key("machines"))
        if not raw:
            return {}
        return {name: machine_from_doc(doc) for name, doc in _loads(raw).items()}

    def set_machines(self, machines: Mapping[str, RegionMachine]) -> None:
        doc = {name: machine_to_doc(m) for name, m in machines.items()}
        self.loop_redis.set(self.key("machines"), json_bytes(doc))

    def evaluation(self) -> dict[str, Any]:
        """Return the last evaluation; parsed again only when a tick stored a new one."""
        stamp_key = self.key("evaluation:stamp")
        cached = self._evaluation
        if cached is not None and self.redis.get(stamp_key) == cached[0]:
            return cached[1]
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(stamp_key)
        pipe.get(self.key("evaluation"))
        stamp, raw = pipe.execute()
        doc: dict[str, Any] = _loads(raw) if raw else {}
        self._evaluation = (stamp, doc) if stamp else None
        return doc

    def set_evaluation(self, doc: Mapping[str, Any]) -> None:
        """Store the evaluation (a JSON-shaped document) and a new stamp in one MULTI."""
        stamp = uuid.uuid4().hex
        pipe = self.loop_redis.pipeline(transaction=True)
        pipe.set(self.key("evaluation"), json_bytes(doc))
        pipe.set(self.key("evaluation:stamp"), stamp)
        pipe.execute()
        self._evaluation = (stamp, dict(doc))

    def table_version(self) -> str | None:
        value = self.redis.get(self.key("table:version"))
        return str(value) if value else None

    def table(self) -> RoutingTable | None:
        """Return the published table; parsed again only when its version changed."""
        cached = self._cached_table
        now = time.monotonic()
        if cached is not None and now - self._table_checked < VERSION_CHECK_S:
            return cached
        self._table_checked = now
        version = self.table_version()
        if version is None:
            return None
        if cached is not None and cached.version == version:
            return cached
        raw = self.redis.get(self.key("table"))
        if not raw:
            return None
        self._cached_table = table_from_json(json.loads(raw))
        return self._cached_table

    def publish_table(
        self, table: RoutingTable, doc: dict[str, Any] | None = None, text: bytes | None = None
    ) -> None:
        """Store and announce the table; ``text`` is its JSON when the caller has it already."""
        if text is None:
            text = json_bytes(doc if doc is not None else table_to_json(table))
        pipe = self.loop_redis.pipeline(transaction=True)
        pipe.set(self.key("table"), text)
        pipe.set(self.key("table:version"), table.version)
        pipe.publish(self.key(TABLE_CHANNEL_SUFFIX), text)
        pipe.execute()
        self._cached_table = table

    def follow_tables(self, listener: Callable[[RoutingTable], None]) -> Callable[[], None]:
        """Follow the table every process publishes here, from a thread of its own."""
        return TableFollower(self.url, self.prefix, listener).start().stop

    def set_drill(self, endpoint: str, instruction: Mapping[str, Any], ttl_s: float) -> None:
        self.redis.set(
            self.key(f"drill:{endpoint}"), json.dumps(instruction), px=max(1, int(ttl_s * 1000))
        )

    def pop_drill(self, endpoint: str) -> dict[str, Any] | None:
        raw = self.redis.getdel(self.key(f"drill:{endpoint}"))
        return json.loads(raw) if raw else None

    def add_completions(self, by_region: Mapping[str, Sequence[Completion]]) -> None:
        """XADD each completion to its region's stream (``MAXLEN ~``), all in one pipeline."""
        pipe = self.redis.pipeline(transaction=False)
        for region, items in by_region.items():
            key = self.key(f"completions:{region}")
            for c in items:
                pipe.xadd(
                    key, {"c": encode_completion(c)}, maxlen=COMPLETIONS_MAXLEN, approximate=True
                )
        pipe.execute()

    def completions(self, region: str, after: str | None, count: int) -> list[StreamEntry]:
        """Return up to ``count`` entries after the id ``after``, oldest first (one XREAD,
        never blocking); with ``after`` None the last ``count`` of the stream (XREVRANGE)."""
        if count <= 0:
            return []
        key = self.key(f"completions:{region}")
        raw: list[Any]
        if after is None:
            raw = list(self.redis.xrevrange(key, "+", "-", count=count) or [])
            raw.reverse()
        else:
            found: Any = self.redis.xread({key: after}, count=count)
            raw = found[0][1] if found else []
        return decode_completions((entry_id, fields.get("c", "")) for entry_id, fields in raw)

    def config_version(self) -> int:
        now = time.monotonic()
        if self._config is not None and now - self._config[0] < VERSION_CHECK_S:
            return self._config[1]
        version = int(self.redis.get(self.key("config-version")) or 0)
        self._config = (now, version)
        return version

    def bump_config_version(self) -> None:
        self._config = (time.monotonic(), int(self.redis.incr(self.key("config-version"))))

    def token_version(self) -> int:
        now = time.monotonic()
        if self._tokens is not None and now - self._tokens[0] < VERSION_CHECK_S:
            return self._tokens[1]
        version = int(self.redis.get(self.key("token-version")) or 0)
        self._tokens = (now, version)
        return version

    def bump_token_version(self) -> None:
        self._tokens = (time.monotonic(), int(self.redis.incr(self.key("token-version"))))

    def incr(self, items: Iterable[tuple[str, float]]) -> None:
        """Add to counters: summed here, written by ``flush`` at most every ``FLUSH_S``."""
        with self._pending_lock:
            for field, amount in items:
                self._pending[field] = self._pending.get(field, 0.0) + amount
            due = time.monotonic() - self._flushed >= FLUSH_S
        if due:
            self.flush()
        else:
            self._ensure_flusher()

    def flush(self) -> None:
        """Write the counters summed in this process to Redis (kept pending if it fails)."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            self._flushed = time.monotonic()
        if not pending:
            return
        pipe = self.redis.pipeline(transaction=False)
        key = self.key("counters")
        for field, amount in pending.items():
            pipe.hincrbyfloat(key, field, amount)
        try:
            pipe.execute()
        except RedisError:  # not counted yet: the next flush tries again
            with self._pending_lock:
                for field, amount in pending.items():
                    self._pending[field] = self._pending.get(field, 0.0) + amount
            raise

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except Exception:  # Redis away at exit: those counts are lost, nothing else
            return

    def _ensure_flusher(self) -> None:
        """Run a thread that flushes what an idle process left pending (one per process)."""
        if self._flusher_pid == os.getpid():
            return
        self._flusher_pid = os.getpid()

        def run() -> None:
            while True:
                time.sleep(FLUSH_S)
                self._flush_quietly()

        threading.Thread(target=run, name="trafficmgr-counters", daemon=True).start()

    def counters(self) -> dict[str, float]:
        self.flush()
        return {k: float(v) for k, v in self.redis.hgetall(self.key("counters")).items()}  # type: ignore[misc]

    def set_tick_info(self, info: Mapping[str, float]) -> None:
        if info:
            self.redis.hset(self.key("tick"), mapping={k: repr(v) for k, v in info.items()})

    def tick_info(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.redis.hgetall(self.key("tick")).items()}  # type: ignore[misc]
