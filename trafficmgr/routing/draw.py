"""The one weighted draw: which of several weighted items a point in [0, 1) lands on.

DNS answers (a client prefix's bucket), the L7 decision (a hash of the client address, or a
random point for a country) and the simulator (a seeded random point) all draw regions or
models by weight; they differ only in where the point comes from, so the rule is written
once here: items lie in their given order on [0, total), each as wide as its weight, and the
point scaled by the total falls in one of them.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate


def cumulative(weights: Iterable[float]) -> tuple[float, ...]:
    """Return the running sums of the weights (negative weights count as 0)."""
    return tuple(accumulate(max(0.0, w) for w in weights))


def draw_index(running: Sequence[float], u: float) -> int:
    """Return the index of the item the point ``u`` in [0, 1) lands on; -1 when none weighs."""
    if not running or running[-1] <= 0:
        return -1
    return min(bisect_right(running, u * running[-1]), len(running) - 1)


def unit_point(key: str) -> float:
    """Return a stable point in [0, 1) for ``key`` (the same in every process)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
