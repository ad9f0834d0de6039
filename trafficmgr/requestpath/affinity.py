"""Session affinity: consistent hashing with bounded load (Mirrokni, Thorup, Zadimoghaddam 2018).

A session (``x-session-id``, else the OpenAI ``user`` field) keeps landing on one endpoint so
its conversation's KV cache is reused, yet affinity yields to health and to load: the session
key is hashed onto a ring of the endpoints serving the model (64 points each), and the
request goes to the first endpoint clockwise that is eligible now and has fewer than
``ceil(c x (in flight + 1) / eligible)`` requests in flight. Adding or removing an endpoint
moves only the sessions that hashed near it; an endpoint at its bound sheds only the new
sessions' overflow to its ring neighbour. The hash is BLAKE2b, so every process (and every
gateway worker) maps a session to the same endpoint.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable, Iterator, Sequence

POINTS_PER_ENDPOINT = 64


def ring_hash(text: str) -> int:
    """Return a stable 64-bit hash of ``text``."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Ring:
    """A consistent-hash ring over endpoint names."""

    __slots__ = ("names", "owners", "points")

    def __init__(self, names: Sequence[str], points: int = POINTS_PER_ENDPOINT) -> None:
        self.names = tuple(names)
        pairs = sorted((ring_hash(f"{name}#{i}"), name) for name in names for i in range(points))
        self.points = [p for p, _ in pairs]
        self.owners = [n for _, n in pairs]

    def walk(self, key: str) -> Iterator[str]:
        """Yield each endpoint once, in ring order from the key's point."""
        if not self.points:
            return
        start = bisect.bisect_left(self.points, ring_hash(key))
        seen: set[str] = set()
        count, wanted = len(self.owners), len(self.names)
        for k in range(count):
            name = self.owners[(start + k) % count]
            if name not in seen:
                seen.add(name)
                yield name
                if len(seen) == wanted:
                    return


def bounded_choice(
    ring: Ring, key: str, eligible: Sequence[str], in_flight: Callable[[str], int], c: float
) -> tuple[str, int] | None:
    """Return the session's endpoint and its rank on the ring (0: its own), or None.

    None when no eligible endpoint is on the ring.
    """
    if not eligible:
        return None
    allowed = set(eligible)
    total = sum(in_flight(n) for n in eligible) + 1
    bound = max(1, math.ceil(c * total / len(eligible)))
    fallback: tuple[str, int] | None = None
    for rank, name in enumerate(ring.walk(key)):
        if name not in allowed:
            continue
        if in_flight(name) < bound:
            return name, rank
        if fallback is None:
            fallback = (name, rank)
    return fallback
