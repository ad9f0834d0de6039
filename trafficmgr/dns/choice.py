"""Which of a list's weighted regions one client is answered with.

The choice is deterministic: the client's prefix (/24, /56, or the ECS source prefix when
shorter) is hashed into one of ``BUCKETS`` buckets, and the bucket picks regions by
cumulative weight over the regions in name order. So a resolver gets the same answer for as
long as the table stays the same (stable within a TTL, no flapping between regions on
re-query); different prefixes spread over the regions in proportion to their weights (to
1/BUCKETS); and every worker process agrees, since the hash is CRC-32 rather than Python's
salted hash.

The table version is deliberately not part of the hash: the control loop publishes a new
version whenever a weight moves, and a version-seeded hash would reshuffle every client on
every such tick (half of them switching regions under a 50/50 split). With the prefix alone
and a fixed region order, a weight moving by 2 % moves 2 % of the prefixes, those at the
boundary, and everyone else keeps their region and its warm caches. The cost is that the
same prefixes are the ones spilled to a second region while a split lasts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from trafficmgr.routing.draw import cumulative, draw_index
from trafficmgr.routing.types import WeightedRegion

BUCKETS = 4096
_GOLDEN = 0.6180339887498949


def zone_seed(zone: str) -> int:
    """Return the hash seed of a zone (so that two zones spread their clients differently)."""
    return zlib.crc32(zone.lower().encode())


def prefix_bucket(prefix: bytes, seed: int) -> int:
    """Return the bucket of a client prefix."""
    return zlib.crc32(prefix, seed) % BUCKETS


def mask_prefix(packed: bytes, bits: int) -> bytes:
    """Return the first ``bits`` bits of a packed address (the rest of the last octet zeroed)."""
    whole, rest = divmod(bits, 8)
    if not rest:
        return packed[:whole]
    return packed[:whole] + bytes([packed[whole] & (0xFF << (8 - rest)) & 0xFF])


def cumulative_weights(candidates: Sequence[WeightedRegion]) -> tuple[float, ...]:
    """Return the running sums of the weights (for ``choose_one``)."""
    return cumulative(w.weight for w in candidates)


def choose_one(
    candidates: Sequence[WeightedRegion], cumulative: Sequence[float], bucket: int
) -> tuple[WeightedRegion, ...]:
    """Pick one region for ``bucket``: what ``choose`` does for one, by bisection."""
    index = pick_index(cumulative, bucket)
    return () if index < 0 else (candidates[index],)


def pick_index(cumulative: Sequence[float], bucket: int) -> int:
    """Return the index ``choose_one`` picks for ``bucket``; -1 for none."""
    return draw_index(cumulative, (bucket + 0.5) / BUCKETS)


def choose(
    candidates: Sequence[WeightedRegion], bucket: int, count: int
) -> tuple[WeightedRegion, ...]:
    """Pick up to ``count`` regions, weighted, without repetition, for ``bucket``."""
    pool = [w for w in candidates if w.weight > 0]
    picked: list[WeightedRegion] = []
    point = (bucket + 0.5) / BUCKETS
    while pool and len(picked) < max(1, count):
        index = draw_index(cumulative(w.weight for w in pool), point)
        picked.append(pool.pop(index))
        point = (point + _GOLDEN) % 1.0  # next pick: a well-spread point of the same bucket
    return tuple(picked)


def merge_models(
    lists: Sequence[tuple[WeightedRegion, ...]], label: str = "any model"
) -> tuple[WeightedRegion, ...]:
    """Average several models' lists into one (for ``api.<zone>``), keeping the first reason."""
    nonempty = [entries for entries in lists if entries]
    if not nonempty:
        return ()
    weights: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for entries in nonempty:
        for w in entries:
            weights[w.region] = weights.get(w.region, 0.0) + w.weight / len(nonempty)
            reasons.setdefault(w.region, f"{label}: {w.reason}")
    ranked = sorted(weights, key=lambda name: (-weights[name], name))
    return tuple(WeightedRegion(n, weights[n], reasons[n]) for n in ranked)
