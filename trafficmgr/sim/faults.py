"""Fault schedules: a region or an endpoint goes down at one time and comes back at another.

A fault is written ``TARGET@START-END`` (simulated seconds), or ``TARGET@START`` for one
that never ends; TARGET names a region (all its endpoints and its ingress fail) or an
endpoint. While down, a target sends no heartbeats, loses the requests it was serving, and
refuses new ones; the engine notices only through the missing heartbeats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trafficmgr.routing.types import Fleet


@dataclass(frozen=True, slots=True)
class Fault:
    target: str
    start: float
    end: float = math.inf

    def __str__(self) -> str:
        end = "" if math.isinf(self.end) else f"{self.end:g}"
        return f"{self.target}@{self.start:g}-{end}".rstrip("-")


def parse_fault(spec: str) -> Fault:
    """Parse ``TARGET@START[-END]``; raise ValueError with the reason."""
    target, sep, times = spec.partition("@")
    if not sep or not target.strip():
        raise ValueError(f"fault {spec!r}: expected TARGET@START-END, e.g. eu-west@30-90")
    start_text, _, end_text = times.partition("-")
    try:
        start = float(start_text)
        end = float(end_text) if end_text.strip() else math.inf
    except ValueError:
        raise ValueError(f"fault {spec!r}: times must be seconds, e.g. eu-west@30-90") from None
    if not (0 <= start < end) or math.isnan(start):
        raise ValueError(f"fault {spec!r}: needs 0 <= START < END")
    return Fault(target.strip(), start, end)


def check_faults(fleet: Fleet, faults: tuple[Fault, ...]) -> None:
    """Raise ValueError when a fault names no region or endpoint of the fleet."""
    names = {r.name for r in fleet.regions} | {e.name for e in fleet.endpoints()}
    for f in faults:
        if f.target not in names:
            raise ValueError(f"fault {f}: {f.target!r} is no region or endpoint of the fleet")
