"""Response-rate limiting per client prefix, against reflection and amplification.

A UDP source address can be forged, so an authoritative server that answers every datagram
lends its bandwidth to whoever spoofs a victim's address. Each client prefix (/24 for IPv4,
/56 for IPv6: the granularity at which one operator's addresses sit) gets a token bucket of
``rate`` responses per second with room for ``burst``. Past it, queries are dropped, except
every ``slip``-th, which gets a tiny truncated answer (TC=1, no records): a real client then
retries over TCP, which cannot be spoofed, while a victim receives no more bytes than the
attacker sent. ``slip`` 0 drops them all, 1 truncates them all (BIND's RRL uses the same
scheme and defaults to 2). TCP is never limited here.

At most ``max_tracked`` prefixes are tracked, in order of their last query; a new one past the
bound evicts the least recently seen. That one has usually refilled (a bucket idle for
``burst / rate`` seconds is full, the same as no bucket); in a flood from more prefixes than
the bound it is the one that waited longest. The bound used to be kept by sweeping the whole
table when it filled: ~17 ms at once at 100,000 prefixes, with every datagram waiting.
"""

from __future__ import annotations

import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

ALLOW = 0
DROP = 1
SLIP = 2

MAX_TRACKED = 100_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float
    over: int = 0  # queries over the limit so far (drives the slip count)


def client_prefix(address: str) -> str:
    """Return the rate-limiting key of a source address: its /24 or /56 prefix."""
    if "." in address and ":" not in address:
        return address[: address.rfind(".")]
    try:
        packed = socket.inet_pton(socket.AF_INET6, address.split("%", 1)[0])
    except OSError:
        return address
    if packed[:12] == b"\x00" * 10 + b"\xff\xff":  # IPv4-mapped: limit as IPv4
        return ".".join(str(b) for b in packed[12:15])
    return packed[:7].hex()


class RateLimiter:
    """Token buckets per client prefix."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        slip: int = 2,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = MAX_TRACKED,
    ) -> None:
        self.rate = float(rate)
        self.burst = float(burst) if burst is not None else max(1.0, self.rate)
        self.slip = max(0, int(slip))
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()  # least recently seen first
        self._max_tracked = max(1, max_tracked)

    @property
    def enabled(self) -> bool:
        """Tell whether limiting is on (a rate of 0 turns it off)."""
        return self.rate > 0

    def check(self, address: str) -> int:
        """Spend a token for one response to ``address``: ALLOW, DROP or SLIP."""
        if self.rate <= 0:
            return ALLOW
        key = client_prefix(address)
        now = self._clock()
        buckets = self._buckets
        bucket = buckets.get(key)
        if bucket is None:
            if len(buckets) >= self._max_tracked:
                buckets.popitem(last=False)
            bucket = buckets[key] = _Bucket(self.burst, now)
        else:
            buckets.move_to_end(key)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return ALLOW
        bucket.over += 1
        if self.slip and bucket.over % self.slip == 0:
            return SLIP
        return DROP

    def __len__(self) -> int:
        return len(self._buckets)
