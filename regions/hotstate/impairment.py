"""Spells when this control plane could not take heartbeats for its own reasons.

A heartbeat refused because the database or the hot state was unreachable is the control
plane's failure, not the agent's; the control loop must not read the silence it causes as
agents failing (Route 53's rule: when the checkers are impaired, keep the last decision).
Each process notes such failures here (``note``), merged into spells ``[start, end]``, and
hands them to the hot state as soon as it answers again (``regions.hotstate.note_impairment``
and the Redis store's own failures); the loop reads every process's spells and holds its
decisions while one is recent (``regions.loop.hold``).

Nothing here imports the hot state: the stores call into it.
"""

from __future__ import annotations

import os
import socket
import threading
import time

# Failures this close together belong to one spell.
MERGE_S = 5.0

_lock = threading.Lock()
_spell: tuple[float, float] | None = None  # this process's current spell
_pending = False  # the current spell changed since the hot state last took it


def source() -> str:
    """This process, as the hot state's spells are keyed."""
    return f"{socket.gethostname()}:{os.getpid()}"


def note(now: float | None = None) -> None:
    """Record a failure of this process to take a heartbeat for its own reasons."""
    global _spell, _pending
    at = time.time() if now is None else now
    with _lock:
        if _spell is not None and at - _spell[1] <= MERGE_S:
            _spell = (_spell[0], max(_spell[1], at))
        else:
            _spell = (at, at)
        _pending = True


def pending() -> tuple[float, float] | None:
    """The spell the hot state has not taken yet, if any."""
    with _lock:
        return _spell if _pending else None


def taken(spell: tuple[float, float]) -> None:
    """The hot state stored ``spell``: nothing is pending unless it grew meanwhile."""
    global _pending
    with _lock:
        if _spell == spell:
            _pending = False


def forget() -> None:
    """Drop this process's spell (tests)."""
    global _spell, _pending
    with _lock:
        _spell, _pending = None, False


class Breaker:
    """Skip a store for ``retry_s`` after it failed, so that an outage costs one timeout per
    ``retry_s`` rather than one per request (each caller then falls back at once)."""

    def __init__(self, retry_s: float = 2.0) -> None:
        self.retry_s = retry_s
        self._open_until = 0.0

    @property
    def open(self) -> bool:
        """True while the store is taken to be away."""
        return time.monotonic() < self._open_until

    def failed(self) -> None:
        self._open_until = time.monotonic() + self.retry_s

    def succeeded(self) -> None:
        self._open_until = 0.0


# This process's view of the database: every path that falls back on what it knew (tokens,
# the fleet view, the loop's durable state) shares it, so that an outage costs the process
# one connection timeout every 2 s rather than one per caller.
database = Breaker(2.0)
