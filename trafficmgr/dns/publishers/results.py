"""What a publish did: a result per target, a report over targets, and counters.

Counters are plain named integers (a dict when read), kept per target and summed into the
process-wide ``TOTALS`` that ``metrics()`` returns, for the control plane's /metrics.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from trafficmgr.dns.publishers.errors import PublishError


class Counters:
    """Named counters; each also counts into ``parent`` (the process-wide totals)."""

    def __init__(self, parent: Counters | None = None) -> None:
        self._parent = parent
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def inc(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n
        if self._parent is not None:
            self._parent.inc(name, n)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


TOTALS = Counters()


def metrics() -> dict[str, int]:
    """Return the process-wide publisher counters (sum over every target)."""
    return TOTALS.snapshot()


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one publish to one target did."""

    target: str
    version: str  # routing table version published
    source: str  # where the current state came from: axfr | state | none | api
    created: int  # record sets
    updated: int
    deleted: int
    unchanged: int
    update_ops: int  # RFC 2136: RRs in the update sections; PowerDNS: rrsets in PATCH bodies
    messages: int  # UPDATE messages or HTTP requests that changed something
    attempts: int  # tries of every request, retries included
    dry_run: bool = False
    duration_s: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    def summary(self) -> str:
        verb = "would change" if self.dry_run else "changed"
        return (
            f"{self.target}: table {self.version} ({self.source}): {verb} "
            f"{self.created} created, {self.updated} updated, {self.deleted} deleted, "
            f"{self.unchanged} unchanged; {self.update_ops} update ops in {self.messages} "
            f"message(s), {self.attempts} attempt(s), {self.duration_s:.2f} s"
        )


@dataclass(frozen=True, slots=True)
class PublishReport:
    """Results of publishing one table to several targets; a failed target does not stop
    the others."""

    version: str
    results: tuple[PublishResult, ...] = ()
    errors: tuple[PublishError, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        """Raise the first error, if any (the others are in ``errors``)."""
        if self.errors:
            raise self.errors[0]

    def summary(self) -> str:
        lines = [r.summary() for r in self.results]
        lines.extend(f"FAILED {e}" for e in self.errors)
        return "\n".join(lines)
