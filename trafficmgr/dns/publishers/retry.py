"""Retry a request with capped, jittered exponential backoff.

Only failures that another try may cure are retried: no answer (timeout, connection
refused or reset) and server errors (SERVFAIL, HTTP 5xx). An operation signals one by
raising ``Retryable``; anything else (a rejected key, a refusal) fails at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from trafficmgr.dns.publishers.errors import UnreachableError
from trafficmgr.dns.publishers.results import Counters

T = TypeVar("T")


class Retryable(Exception):
    """A transient failure: worth another try after a pause."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4
    first_delay_s: float = 0.25
    max_delay_s: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2  # each pause is scaled by a random factor in [1 - jitter, 1 + jitter]

    def delays(self) -> Iterator[float]:
        """Yield the pauses between attempts (one fewer than ``attempts``)."""
        delay = self.first_delay_s
        for _ in range(max(0, self.attempts - 1)):
            yield min(self.max_delay_s, delay) * random.uniform(1 - self.jitter, 1 + self.jitter)
            delay *= self.multiplier


@dataclass
class Attempts:
    """Tries made so far by one publish (shared by its requests)."""

    tries: int = 0
    retries: int = 0


def with_retries(
    operation: Callable[[], T],
    policy: RetryPolicy,
    what: str,
    target: str,
    counters: Counters,
    attempts: Attempts,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``operation``, retrying on ``Retryable``; raise ``UnreachableError`` at the end."""
    delays = policy.delays()
    made = 0
    while True:
        made += 1
        attempts.tries += 1
        try:
            return operation()
        except Retryable as exc:
            delay = next(delays, None)
            if delay is None:
                raise UnreachableError(
                    f"{what} failed after {made} attempt(s): {exc}", target, made
                ) from exc
            attempts.retries += 1
            counters.inc("retries")
            sleep(delay)
