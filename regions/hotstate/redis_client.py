"""The hot state's Redis connections: short timeouts, and a breaker in front of them.

A partitioned Redis (a peer that accepts TCP and never answers) raises nothing: each read waits
for its socket timeout. redis-py's defaults (5 s, retried three times with backoff) made every
path touching the hot state take 15 to 25 s before its 503, and a request asks it several
times (token versions, config version, the heartbeat put). So:

- request paths use a client that gives up after ``TRAFFICMGR_HOTSTATE_TIMEOUT_S`` (1 s) to
  connect or to wait for a reply, and never retries a timeout (a refused connection is tried
  once more at once: a pooled socket may have gone stale in a Redis restart);
- the control loop's writes (the fenced save of a tick, its lease, the table's publication)
  run scripts and values as big as the fleet's table, and a busy Redis (a fork for a snapshot,
  an fsync) may be silent longer than a second; they use a second client that connects as
  fast but waits ``LOOP_READ_TIMEOUT_S`` for the reply, as before;
- both share one ``ProbingBreaker``: after a timeout or a refusal Redis is not asked for
  ``RETRY_S``, every call raising ``HotStateAway`` (a ``ConnectionError``: the outage contract
  answers 503 with ``Retry-After``; fail-static readers keep what they hold) at once. Then one
  call probes; the others are still refused until it answered. A partition costs a process one
  timeout every ``RETRY_S``, not one per request.

The read timeout is how long a socket may stay silent, not how long a command may take: a big
reply that keeps arriving is never cut. Nothing here blocks by design (no BLPOP, no XREAD
with ``block``, no subscription: the DNS server and the observers subscribe with their own
clients).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from regions.hotstate.impairment import Breaker

# How long the loop's writes may wait for Redis to answer (scripts over the whole table).
LOOP_READ_TIMEOUT_S = 5.0
# How long Redis is not asked after it timed out or refused.
RETRY_S = 2.0

T = TypeVar("T")


class HotStateAway(RedisConnectionError):
    """Redis failed moments ago and is not asked again yet (the breaker is open)."""


class ProbingBreaker(Breaker):
    """A ``Breaker`` that lets one call through after the spell (a probe) and refuses the
    others until that call answered or ``probe_s`` passed."""

    def __init__(self, retry_s: float = RETRY_S, probe_s: float = 1.0) -> None:
        super().__init__(retry_s)
        self.probe_s = probe_s
        self._tripped = False
        self._lock = threading.Lock()

    def admit(self) -> bool:
        """Whether a call may ask Redis now (the first after a spell becomes the probe)."""
        with self._lock:
            if self.open:
                return False
            if self._tripped:
                self._open_until = time.monotonic() + self.probe_s
                self._tripped = False  # a probe that fails trips it again
            return True

    def failed(self) -> None:
        with self._lock:
            self._tripped = True
            super().failed()

    def succeeded(self) -> None:
        if self._open_until or self._tripped:  # the common case takes no lock
            with self._lock:
                self._tripped = False
                super().succeeded()

    def guard(self, call: Callable[[], T]) -> T:
        """Run ``call`` unless the breaker is open; a timeout or refusal opens it."""
        if not self.admit():
            raise HotStateAway(f"Redis failed moments ago; not asked again for {self.retry_s} s")
        try:
            result = call()
        except HotStateAway:
            raise
        except (RedisConnectionError, RedisTimeoutError):
            self.failed()
            raise
        except RedisError:  # Redis answered, with an error of the command's own
            self.succeeded()
            raise
        self.succeeded()
        return result


class GuardedRedis(redis.Redis):
    """A client whose commands and pipelines pass the breaker."""

    breaker: ProbingBreaker

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.breaker.guard(
            lambda: super(GuardedRedis, self).execute_command(*args, **options)
        )

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        pipe = GuardedPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.breaker = self.breaker
        return pipe


class GuardedPipeline(Pipeline):
    """A pipeline sent as one call through the breaker."""

    breaker: ProbingBreaker

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        return self.breaker.guard(lambda: super(GuardedPipeline, self).execute(raise_on_error))


def connect(
    url: str, timeout_s: float, read_timeout_s: float, breaker: ProbingBreaker
) -> GuardedRedis:
    """A client for ``url`` that connects within ``timeout_s``, waits ``read_timeout_s`` for
    a reply, retries only a refused or dropped connection (once, at once) and passes ``breaker``."""
    pool = redis.ConnectionPool.from_url(
        url,
        socket_connect_timeout=timeout_s,
        socket_timeout=read_timeout_s,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        decode_responses=True,
    )
    client = GuardedRedis(connection_pool=pool)
    client.auto_close_connection_pool = True  # as ``from_url``: closing the client closes it
    client.breaker = breaker
    return client
