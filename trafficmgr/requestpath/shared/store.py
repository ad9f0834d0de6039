"""The shared request-path state in Redis: publish this process's part, merge the others'.

One ``SharedState`` per process (gateway worker, endpoint-picker replica), one thread: every
``interval_s`` (or sooner, after ``every_requests`` decisions) it writes this process's part
(``RequestPath.own_part``: in flight per endpoint, ejections, slow-start ramps) under its
lease key with the lease as time to live, appends the prompt blocks sent since to the shared
stream, reads the other processes' parts and the stream's new entries, and merges them into
the core (``merge_parts``, ``RequestPath.merge_shared``). Two round trips a cycle. Keys and
layouts: ``trafficmgr.contracts`` (``rp:``).

Decisions never wait on it: the core decides from whatever was merged last. When Redis cannot
be reached the thread retries every ``retry_s``; once the last merge is older than
``max_staleness_s`` the core decides from its own view and the heartbeats alone (the others'
figures dropped), and every such decision is counted (``local_decisions``) until Redis
answers again. A process that starts runs one cycle before it serves (``start``), reading the
recent blocks (``WARM_ENTRIES``) and the others' work: it decides warm.

Corrupt or foreign values under the keys are skipped and counted by reason (``ignored``),
never fatal.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from trafficmgr.contracts import (
    SHARED_BLOCKS_KEY,
    SHARED_BLOCKS_MAXLEN,
    SHARED_PROCS_KEY,
    SharedBlocks,
    SharedProcess,
    decode_shared_blocks,
    decode_shared_process,
    encode_shared_blocks,
    encode_shared_process,
    redis_key,
    shared_process_key,
)
from trafficmgr.requestpath.core import RequestPath
from trafficmgr.requestpath.shared.config import SharingConfig
from trafficmgr.routing.sharedstate import merge_parts

log = logging.getLogger("trafficmgr.requestpath.shared")

WARM_ENTRIES = 2_000  # stream entries a starting process reads back
READ_ENTRIES = 5_000  # stream entries read per cycle at most


def process_id() -> str:
    """Return a new id for this process: host, pid and a nonce (a reused pid is not it)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SharedState:
    """Keep one core's view merged with the other processes' (see the module doc)."""

    def __init__(
        self,
        core: RequestPath,
        config: SharingConfig,
        client: Any = None,
        *,
        pid: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.core, self.config, self.wall = core, config, wall
        self.client = client if client is not None else connect(config)
        self.pid = pid or process_id()
        self._key = redis_key(shared_process_key(self.pid), config.prefix)
        self._procs = redis_key(SHARED_PROCS_KEY, config.prefix)
        self._stream = redis_key(SHARED_BLOCKS_KEY, config.prefix)
        self._last_id: str | None = None
        self._trimmed_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._since_publish = 0
        self.connected = False
        self.last_ok: float | None = None  # monotonic, the last merge
        self.peers = 0
        self.staleness_s = 0.0  # the oldest part merged last, plus the time since that merge
        self.cycles = 0
        self.local_decisions = 0
        self.errors: dict[str, int] = {}
        self.ignored: dict[str, int] = {}
        core.share_blocks()
        core.on_decided = self._decided
        core.sharing = self

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Merge once now (a starting process decides warm), then keep merging in a thread."""
        self.sync()
        self._thread = threading.Thread(target=self._run, name="shared-state", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and withdraw this process's part (its work is finished or lost)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(self._key)
            pipe.srem(self._procs, self.pid)
            pipe.execute()
        except redis.RedisError:
            pass  # the lease expires on its own

    def _run(self) -> None:
        cfg = self.config
        while not self._stop.is_set():
            self._wake.wait(cfg.interval_s if self.connected else cfg.retry_s)
            self._wake.clear()
            if not self._stop.is_set():
                self.sync()

    def _decided(self) -> None:
        """Count one decision (called by the core on the request path: no I/O here)."""
        if not self.fresh():
            self.local_decisions += 1
        self._since_publish += 1
        if self._since_publish >= self.config.every_requests:
            self._since_publish = 0
            self._wake.set()

    def fresh(self) -> bool:
        """Tell whether the others' figures merged last are within the staleness bound."""
        last = self.last_ok
        return last is not None and time.monotonic() - last <= self.config.max_staleness_s

    # --- one cycle ------------------------------------------------------------------------

    def sync(self) -> bool:
        """Publish this process's part and merge the others'; return whether Redis answered."""
        try:
            self._sync()
        except redis.RedisError as exc:
            self._failed(type(exc).__name__)
            return False
        except (OSError, ValueError, TypeError) as exc:  # a reply that is not Redis's
            self._failed(type(exc).__name__)
            return False
        self.connected, self.last_ok = True, time.monotonic()
        self.cycles += 1
        return True

    def _failed(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1
        if self.connected:
            log.warning("shared state: Redis unreachable (%s); deciding from this view", reason)
        self.connected = False
        if not self.fresh():
            self.core.forget_peers()
            self.peers = 0

    def _sync(self) -> None:
        cfg = self.config
        part, blocks = self.core.own_part(self.pid, self.wall())
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self._key, encode_shared_process(part), px=max(1, int(cfg.lease_s * 1000)))
        pipe.sadd(self._procs, self.pid)
        if blocks:
            fields: dict[Any, Any] = {"p": self.pid, "b": encode_shared_blocks(blocks)}
            pipe.xadd(self._stream, fields, maxlen=SHARED_BLOCKS_MAXLEN, approximate=True)
        now = time.monotonic()
        if now - self._trimmed_at > 1.0:
            self._trimmed_at = now
            oldest = int((self.wall() - cfg.blocks_ttl_s) * 1000)
            pipe.xtrim(self._stream, minid=f"{oldest}-0", approximate=True)
        pipe.smembers(self._procs)
        if self._last_id is None:  # warm start: the recent entries, newest first
            pipe.xrevrange(self._stream, count=WARM_ENTRIES)
        else:
            pipe.xread({self._stream: self._last_id}, count=READ_ENTRIES)
        replies = pipe.execute()
        members, entries = replies[-2], replies[-1]
        if self._last_id is None:
            entries = list(reversed(entries))
        elif entries:
            entries = entries[0][1]
        batches = self._batches(entries)
        parts = self._parts([_text(m) for m in members if _text(m) != self.pid])
        wall = self.wall()
        merged = merge_parts(parts, self.pid, wall, cfg.max_staleness_s)
        for reason, n in merged.ignored.items():
            self._ignore(reason, n)
        self.core.merge_shared(merged, wall, batches, self.pid)
        self.peers = merged.processes
        self.staleness_s = merged.oldest_s

    def _parts(self, others: list[str]) -> list[SharedProcess]:
        if not others:
            return []
        values = self.client.mget(
            [redis_key(shared_process_key(p), self.config.prefix) for p in others]
        )
        parts, gone = [], []
        for pid, raw in zip(others, values, strict=True):
            if raw is None:
                gone.append(pid)
                continue
            try:
                part = decode_shared_process(raw)
            except ValueError as exc:
                self._ignore(str(exc).split(":", 1)[0])
                continue
            if part.pid != pid:
                self._ignore("foreign")
                continue
            parts.append(part)
        if gone:  # their leases expired: their work with them
            self.client.srem(self._procs, *gone)
            self._ignore("lease_expired", len(gone))
        return parts

    def _batches(self, entries: list[Any]) -> list[tuple[str, SharedBlocks]]:
        out = []
        for entry_id, fields in entries:
            self._last_id = _text(entry_id)
            pid, raw = fields.get(b"p", fields.get("p")), fields.get(b"b", fields.get("b"))
            if pid is None or raw is None:
                self._ignore("foreign")
                continue
            try:
                out.append((_text(pid), decode_shared_blocks(raw)))
            except ValueError:
                self._ignore("corrupt")
        if self._last_id is None:
            self._last_id = "0-0" if not entries else self._last_id
        return out

    def _ignore(self, reason: str, n: int = 1) -> None:
        self.ignored[reason] = self.ignored.get(reason, 0) + n

    # --- reporting ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Return what ``/healthz`` and the metrics show of the shared state."""
        age = None if self.last_ok is None else time.monotonic() - self.last_ok
        return {
            "enabled": True,
            "connected": self.connected,
            "process": self.pid,
            "peers": self.peers,
            "peer_in_flight": self.core.peer_in_flight(),
            "staleness_s": None if age is None else round(age + self.staleness_s, 4),
            "max_staleness_s": self.config.max_staleness_s,
            "mode": "shared" if self.fresh() else "local",
            "local_decisions": self.local_decisions,
            "errors": dict(self.errors),
            "ignored": dict(self.ignored),
        }


def connect(config: SharingConfig) -> redis.Redis:
    """Return a client that gives up after ``timeout_s`` and never retries on its own."""
    return redis.Redis.from_url(
        config.url,
        socket_timeout=config.timeout_s,
        socket_connect_timeout=config.timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
