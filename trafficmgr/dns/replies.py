"""Whole replies by query, for the UDP fast path: the query's bytes in, the reply's bytes out.

A reply is a pure function of the query's bytes after its ID (question with its letter case,
flags, EDNS buffer size, the ECS option with its address and source prefix), of the table
and zone being served, and, for a routed name asked without ECS (or with a source prefix of
0), of the client's /24 (IPv4) or /56 (IPv6) source prefix, which then locates the client
and picks among weighted regions. So a reply rendered once is kept under the query's bytes
minus the ID (plus that source prefix when it was used) and sent again with the next query's
ID in front: no parsing, no lookup, no rendering. The ECS scope, the pick among weighted
regions (by client prefix) and truncation are those of the reply first rendered, which is
what rendering it again would give.

A table swap does not empty the cache: it starts a new generation (``advance``), and each
entry names (by number) its ``Basis`` (``carry``), what it was rendered from besides its
query and the zone, shared by every reply that stands or falls with it. A hit is served as it
is when its basis was found true in the current generation; otherwise the basis is checked
against the new table once (for all its replies); when it changed, a reply is kept only if
its own region is the one the new weights pick for its prefix bucket (``carry.same_pick``),
and rendered again otherwise, so no reply of an earlier table is sent once the new table
answers differently. Only a zone whose answers differ (a fleet with other names, addresses or
TTL) empties the cache (``reset``). Each entry also names the counters its query moves
(``Counters.signature``), which a hit counts with one increment.
"""

from __future__ import annotations

import socket
from collections import OrderedDict
from collections.abc import Hashable
from typing import TypeVar

_MAPPED = b"\x00" * 10 + b"\xff\xff"

# The reply after its ID, the counters' signature, its basis's id, the prefix bucket it was
# picked by (``carry.same_pick``; 0 when it was not picked among several regions), and its
# identity for the rate limiter (``ratelimit``).
Entry = tuple[bytes, int, int, int, bytes]
K = TypeVar("K", bound=Hashable)


def source_bucket(source: str) -> str:
    """Return the client prefix a reply without ECS depends on: the /24 or /56 of ``source``.

    These are the prefixes the responder locates and hashes a source address by (its
    ``V4_GRANULARITY`` and ``V6_GRANULARITY``).
    """
    dot = source.rfind(".")
    if dot >= 0:  # IPv4, or IPv4-mapped IPv6 ("::ffff:192.0.2.1")
        return source[:dot]
    try:
        packed = socket.inet_pton(socket.AF_INET6, source.split("%", 1)[0])
    except OSError:
        return source
    return packed[:7].hex()


class ReplyCache:
    """Rendered replies, bounded; ``fixed`` for replies of any source."""

    __slots__ = ("by_source", "fixed", "generation", "limit", "snapshot", "zone")

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.snapshot: object = None
        self.zone: object = None
        self.generation = 0
        self.fixed: OrderedDict[bytes, Entry] = OrderedDict()
        self.by_source: OrderedDict[tuple[bytes, str], Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self.fixed) + len(self.by_source)

    def advance(self, snapshot: object, zone: object) -> int:
        """Start the generation of ``snapshot`` and ``zone``, keeping the entries; return it."""
        self.snapshot = snapshot
        self.zone = zone
        self.generation += 1
        return self.generation

    def reset(self, snapshot: object, zone: object) -> int:
        """Start the generation of ``snapshot`` and ``zone``, empty (a new dict: an atomic swap)."""
        self.fixed = OrderedDict()
        self.by_source = OrderedDict()
        return self.advance(snapshot, zone)

    def get(self, key: bytes, source: str) -> Entry | None:
        """Return the entry of a query (its bytes after the ID) from ``source``, if any."""
        entry = self.fixed.get(key)
        if entry is None and self.by_source:
            entry = self.by_source.get((key, source_bucket(source)))
        return entry

    def put(self, key: bytes, bucket: str | None, entry: Entry) -> None:
        """Keep a reply (minus its ID); ``bucket`` is the source prefix it depends on, if any.

        A stale entry of the same query is replaced in place (no eviction).
        """
        if bucket is None:
            _bounded_put(self.fixed, key, entry, self.limit)
        else:
            _bounded_put(self.by_source, (key, bucket), entry, self.limit)

    def replace(self, key: bytes, source: str, entry: Entry) -> None:
        """Replace the entry ``get`` found for a query from ``source`` (keeping its place)."""
        if key in self.fixed:
            self.fixed[key] = entry
        else:
            self.by_source[(key, source_bucket(source))] = entry


def _bounded_put(table: OrderedDict[K, Entry], key: K, entry: Entry, limit: int) -> None:
    """Keep ``entry``, evicting the oldest first: cheap, and fair to a changing mix.

    An ``OrderedDict`` unlinks its oldest entry in constant time. A plain dict finds it with
    ``next(iter(table))``, which walks over the slots that earlier evictions emptied until the
    next resize compacts them: 17 to 20 µs per put once the cache is full, against about 1 µs.
    """
    if len(table) >= limit and key not in table:
        table.popitem(last=False)
    table[key] = entry
