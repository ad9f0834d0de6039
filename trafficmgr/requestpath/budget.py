"""A retry budget (Finagle's): retries may add only a bounded share of load.

Retrying every failed request on another endpoint turns an outage into a retry storm. Each
request deposits ``ratio`` of a retry, and ``per_second`` more accrue with time so that a
quiet process can still retry; a retry withdraws one; the balance is capped. A front asks
``allow()`` before each retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RetryBudget:
    """Retries allowed: ``ratio`` per request plus ``per_second`` (capped at ``cap``)."""

    def __init__(
        self,
        ratio: float = 0.2,
        per_second: float = 10.0,
        cap: float = 100.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ratio = ratio
        self.per_second = per_second
        self.cap = max(cap, per_second)
        self.balance = self.cap
        self.denied = 0
        self._clock = clock
        self._at = clock()

    def deposit(self) -> None:
        """Count one request."""
        self.balance = min(self.cap, self.balance + self.ratio)

    def allow(self) -> bool:
        """Take one retry from the budget; False when it is spent."""
        now = self._clock()
        self.balance = min(self.cap, self.balance + (now - self._at) * self.per_second)
        self._at = now
        if self.balance >= 1.0:
            self.balance -= 1.0
            return True
        self.denied += 1
        return False
