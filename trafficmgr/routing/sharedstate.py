"""The merge of the shared request-path state: what the other deciding processes say, as one.

Pure: values in, values out, no I/O and no clock of its own. Each process's part is the
contract's ``SharedProcess`` (``trafficmgr.contracts.shared_part`` builds one); the request
path's publisher (``requestpath.shared.store``) and the simulator (``sim.gateways``) both merge
the parts with ``merge_parts`` and the prompt blocks with ``merge_blocks``, and add the sum to
a process's own figures with ``with_peers``, so what the simulator tells a picker is what
production can know. The pickers never see any of this: they see the summed figures.

A part older than ``max_staleness_s`` (by the reader's wall clock), or published more than
``max_skew_s`` in the future (a clock that jumped), is left out and counted by reason: the
bound on staleness is a setting, and a process that stopped publishing stops counting long
before its lease expires. The reader's own part is never merged (it knows its own exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

# A peer's figures for one endpoint: requests, outstanding prefill and decode tokens.
PeerFlight = tuple[int, float, float]


class Part(Protocol):
    """One process's part (the contract's ``SharedProcess``)."""

    @property
    def pid(self) -> str: ...
    @property
    def at(self) -> float: ...
    @property
    def flight(self) -> Mapping[str, tuple[int, float, float]]: ...
    @property
    def ejected(self) -> Mapping[str, tuple[float, bool]]: ...
    @property
    def ramps(self) -> Mapping[str, float]: ...


@dataclass(slots=True)
class Merged:
    """The others' parts, summed: what a process adds to its own view."""

    flight: dict[str, PeerFlight] = field(default_factory=dict)
    # endpoint → (ejected until, a probe in flight), in the reader's wall clock, the latest
    ejected: dict[str, tuple[float, bool]] = field(default_factory=dict)
    ramps: dict[str, float] = field(default_factory=dict)  # endpoint → latest ramp start
    processes: int = 0  # other processes merged
    oldest_s: float = 0.0  # age of the oldest part merged (the staleness seen)
    ignored: dict[str, int] = field(default_factory=dict)  # parts left out, by reason


def merge_parts(
    parts: Iterable[Part],
    own_pid: str,
    wall: float,
    max_staleness_s: float,
    max_skew_s: float = 1.0,
) -> Merged:
    """Sum the others' parts fresh enough to trust (see the module doc)."""
    out = Merged()
    flight = out.flight
    for part in parts:
        if part.pid == own_pid:
            continue
        age = wall - part.at
        if age > max_staleness_s:
            _count(out.ignored, "stale")
            continue
        if age < -max_skew_s:
            _count(out.ignored, "clock_skew")
            continue
        out.processes += 1
        out.oldest_s = max(out.oldest_s, age)
        for name, figures in part.flight.items():
            n, prefill, decode = figures[0], figures[1], figures[2]
            if n <= 0 or prefill < 0 or decode < 0:
                _count(out.ignored, "bad_figure")
                continue
            had = flight.get(name)
            flight[name] = (
                (n, prefill, decode)
                if had is None
                else (had[0] + n, had[1] + prefill, had[2] + decode)
            )
        for name, (until, probing) in part.ejected.items():
            held = out.ejected.get(name)
            if held is None or until > held[0] or probing:
                out.ejected[name] = (
                    max(until, held[0]) if held else until,
                    probing or (held[1] if held else False),
                )
        for name, since in part.ramps.items():
            if since > out.ramps.get(name, -1.0):
                out.ramps[name] = since
    return out


def merge_blocks(
    batches: Iterable[tuple[str, Mapping[str, list[int]]]],
    own_pid: str,
    add: Callable[[str, list[int]], None],
) -> int:
    """Add the others' prompt blocks to the reader's per-endpoint index; return how many."""
    count = 0
    for pid, blocks in batches:
        if pid == own_pid:
            continue
        for endpoint, hashes in blocks.items():
            add(endpoint, hashes)
            count += len(hashes)
    return count


def with_peers(
    running: int, prefill: float, decode: float, peer: PeerFlight | None
) -> tuple[int, float, float]:
    """Return a process's own in-flight figures for an endpoint plus the others'."""
    if peer is None:
        return running, prefill, decode
    return running + peer[0], prefill + peer[1], decode + peer[2]


def _count(counts: dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1
