"""Client tokens checked before they cost anything: shape, a digest-keyed cache, limits.

Both fronts answer a bearer token through ``TokenGate.identify``, in this order, on the
event loop until the last step:

1. a client address that has failed too often lately gets 429 with Retry-After (a token
   bucket per address: ``FailureLimiter``, itself a bounded LRU table);
2. a token not shaped like one the source issues gets 401 at once: the source's own
   ``well_formed`` when it has one (``ShapedTokens``: the control plane accepts only
   ``create_token``'s client secrets), else at most ``MAX_TOKEN_CHARS`` visible ASCII
   characters. Nothing is cached, hashed for the source or sent to a thread for it;
3. the cache answers: keyed by a 16-byte digest (never the secret itself), least recently
   used first out, every entry with its own expiry; answers "unknown" are held apart from
   identities, so a flood of unknown tokens never evicts a valid one;
4. otherwise the source is asked in a thread, concurrent requests with the same token
   sharing one lookup; at most ``max_pending`` lookups run at once, and beyond that the
   request gets 503 with Retry-After instead of a place in an unbounded queue.

Every 401 counts against the client's address.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from trafficmgr.requestpath.types import ClientIdentity, Refusal

MAX_TOKEN_CHARS = 512  # without a source's own shape: longer than any real API key
_VISIBLE = frozenset(chr(c) for c in range(0x21, 0x7F))
V = TypeVar("V")


@runtime_checkable
class ShapedTokens(Protocol):
    """A source that can tell, without I/O, whether a token could be one it issued."""

    def well_formed(self, token: str) -> bool:
        """Whether ``token`` has the shape (prefix, length, alphabet) of an issued one."""
        ...


def plausible(token: str) -> bool:
    """Whether ``token`` could be a bearer token at all (length and alphabet)."""
    return 0 < len(token) <= MAX_TOKEN_CHARS and _VISIBLE.issuperset(token)


def token_key(token: str) -> bytes:
    """Return the cache key of a token: a digest, so the cache holds no secret."""
    return hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """Bounds of the token cache, of lookups in flight and of failures per client."""

    ttl_s: float = 5.0  # an identity is trusted this long (the revocation delay)
    negative_ttl_s: float = 1.0  # an unknown token stays unknown this long
    cache_size: int = 10_000  # identities held
    negative_size: int = 10_000  # unknown tokens held
    max_pending: int = 64  # source lookups in flight; beyond: 503
    failures_burst: int = 20  # 401s a client address may collect at once ...
    failures_per_s: float = 1.0  # ... and this many more per second after that
    clients_tracked: int = 16_384  # addresses whose failures are remembered


class ExpiringLru(Generic[V]):
    """A bounded map whose entries expire; the least recently used goes first when full."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[bytes, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes, now: float) -> tuple[bool, V | None]:
        """Return (found, value); an expired entry is dropped and not found."""
        found = self._items.get(key)
        if found is None:
            return False, None
        if found[0] <= now:
            del self._items[key]
            return False, None
        self._items.move_to_end(key)
        return True, found[1]

    def put(self, key: bytes, value: V, until: float) -> None:
        self._items[key] = (until, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: bytes) -> None:
        self._items.pop(key, None)


class FailureLimiter:
    """Token buckets of 401s per client address, in a bounded LRU table."""

    def __init__(self, burst: int, per_s: float, size: int) -> None:
        self.burst, self.per_s, self.size = float(burst), per_s, size
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # level, at

    def __len__(self) -> int:
        return len(self._buckets)

    def _level(self, client: str, now: float) -> float:
        found = self._buckets.get(client)
        if found is None:
            return self.burst
        level, at = found
        return min(self.burst, level + (now - at) * self.per_s)

    def retry_after(self, client: str, now: float) -> int | None:
        """Seconds until ``client`` may try again; None when it may now."""
        level = self._level(client, now)
        if level >= 1.0:
            return None
        return max(1, math.ceil((1.0 - level) / self.per_s)) if self.per_s > 0 else 60

    def failed(self, client: str, now: float) -> None:
        """Take one failure out of ``client``'s bucket."""
        self._buckets[client] = (max(0.0, self._level(client, now) - 1.0), now)
        self._buckets.move_to_end(client)
        while len(self._buckets) > self.size:
            self._buckets.popitem(last=False)


class TokenGate:
    """The whole bearer-token check of a front (module doc); one per core."""

    def __init__(
        self,
        lookup: Callable[[str], ClientIdentity | None],
        well_formed: Callable[[str], bool],
        limits: TokenLimits,
        clock: Callable[[], float],
    ) -> None:
        self._lookup, self.well_formed = lookup, well_formed
        self.limits, self._clock = limits, clock
        self._lock = threading.Lock()  # lookups finish in threads; the loop reads
        self._known: ExpiringLru[ClientIdentity] = ExpiringLru(limits.cache_size)
        self._unknown: ExpiringLru[bool] = ExpiringLru(limits.negative_size)
        self.limiter = FailureLimiter(
            limits.failures_burst, limits.failures_per_s, limits.clients_tracked
        )
        self._pending: dict[bytes, asyncio.Future[ClientIdentity | None]] = {}
        self.lookups = 0  # source lookups started (a figure for tests and metrics)

    def held(self) -> int:
        """Return how many cache entries (identities and unknown tokens) are held."""
        return len(self._known) + len(self._unknown)

    def cached(self, token: str) -> tuple[bool, ClientIdentity | None]:
        """Return (known, identity) without I/O; a malformed token is known to be no one."""
        if not self.well_formed(token):
            return True, None
        key, now = token_key(token), self._clock()
        with self._lock:
            hit, who = self._known.get(key, now)
            if hit:
                return True, who
            unknown, _ = self._unknown.get(key, now)
        return unknown, None

    def lookup(self, token: str) -> ClientIdentity | None:
        """Ask the source (blocking) and cache its answer; a malformed token is not asked."""
        if not self.well_formed(token):
            return None
        who = self._lookup(token)
        key, now = token_key(token), self._clock()
        with self._lock:
            if who is None:
                self._known.pop(key)
                self._unknown.put(key, True, now + self.limits.negative_ttl_s)
            else:
                self._unknown.pop(key)
                self._known.put(key, who, now + self.limits.ttl_s)
        return who

    async def identify(self, token: str | None, client: str | None) -> ClientIdentity | Refusal:
        """Return who ``token`` belongs to, or the 401, 429 or 503 to answer (module doc)."""
        address, now = client or "-", self._clock()
        wait = self.limiter.retry_after(address, now)
        if wait is not None:
            return Refusal(
                429, "too_many_failures", "too many failed authentications from this address", wait
            )
        if token is None:
            return self._failed(address, "missing bearer token: send Authorization: Bearer <token>")
        known, who = self.cached(token)
        if not known:
            found = await self._ask(token)
            if isinstance(found, Refusal):
                return found
            who = found
        if who is None:
            return self._failed(address, "unknown or revoked token")
        return who

    async def _ask(self, token: str) -> ClientIdentity | Refusal | None:
        """Look ``token`` up in a thread, sharing a lookup already under way for it.

        The lookup is not tied to the request that started it: a client going away does
        not cancel it for the others waiting, and it counts as pending until it is done."""
        key = token_key(token)
        lookup = self._pending.get(key)
        if lookup is None:
            if len(self._pending) >= self.limits.max_pending:
                return Refusal(
                    503, "authentication_busy", "too many token checks in progress; retry", 1
                )
            lookup = asyncio.get_running_loop().run_in_executor(None, self.lookup, token)
            self._pending[key] = lookup
            lookup.add_done_callback(lambda _: self._pending.pop(key, None))
            self.lookups += 1
        return await asyncio.shield(lookup)

    def _failed(self, address: str, message: str) -> Refusal:
        self.limiter.failed(address, self._clock())
        return Refusal(401, "invalid_api_key", message)
