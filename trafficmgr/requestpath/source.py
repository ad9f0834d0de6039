"""Everything the request path needs from the control plane, through one injected source.

The gateway and the endpoint picker never import the Django app: the process that starts
them hands over a ``ControlPlane`` (the management commands wire one backed by the database
and the hot state). ``StaticSource`` is the one without a control plane: the fleet from a
fleet file, the engine's static table, fixed client tokens; tests and benchmarks use it, and
so does ``python -m trafficmgr.gateway``.

Only ``authenticate`` and ``locate`` are called on the request path, and the core caches
what ``authenticate`` answers; everything else is called from ``RequestPath.maintain``,
which a front runs off the request path (a thread), so a source may block on I/O there.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from trafficmgr.contracts import Completion, StreamEntry
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.geoip import Locator
from trafficmgr.requestpath.tokens import plausible
from trafficmgr.requestpath.types import ClientIdentity
from trafficmgr.routing.types import ClientLocation, Fleet, Heartbeat, RoutingTable

Locate = Callable[[str], ClientLocation]
log = logging.getLogger("trafficmgr.requestpath")


@runtime_checkable
class ControlPlane(Protocol):
    """What the request-path core reads from the control plane and reports back to it."""

    def fleet(self) -> Fleet:
        """Return the fleet as configured now."""
        ...

    def table(self) -> RoutingTable | None:
        """Return the published routing table; None before the first (the static one is used)."""
        ...

    def heartbeats(self, names: Sequence[str]) -> Mapping[str, Heartbeat]:
        """Return the latest heartbeat of each named endpoint that has one."""
        ...

    def locate(self, ip: str) -> ClientLocation:
        """Locate a client address (GeoIP); never raise."""
        ...

    def authenticate(self, token: str) -> ClientIdentity | None:
        """Return the client a bearer token belongs to, or None when it is unknown or revoked."""
        ...

    def report_completions(self, items: Sequence[Completion]) -> None:
        """Store completed requests so every process's pickers learn from them."""
        ...

    def completions(self, region: str, after: str | None, count: int) -> Sequence[StreamEntry]:
        """Return completions reported for a region after stream id ``after`` (None: latest)."""
        ...


def token_digest(token: str) -> str:
    """Return the SHA-256 of a token: what a source keeps instead of the secret."""
    return hashlib.sha256(token.encode()).hexdigest()


class StaticSource:
    """A control plane made of a fleet, its static table and fixed tokens (no database)."""

    def __init__(
        self,
        fleet: Fleet,
        tokens: Mapping[str, ClientIdentity] | None = None,
        locate: Locate | None = None,
        keep_reported: int = 10_000,
    ) -> None:
        self._fleet = fleet
        self._tokens = {token_digest(t): who for t, who in (tokens or {}).items()}
        self._longest = max(map(len, tokens or {}), default=0)
        self._locate = locate
        self._locator: Locator | None = None
        self._locator_failed = False
        self._heartbeats: dict[str, Heartbeat] = {}
        self._lock = threading.Lock()
        self.reported: deque[Completion] = deque(maxlen=keep_reported)

    @classmethod
    def from_file(
        cls, path: str, tokens: Mapping[str, ClientIdentity] | None = None
    ) -> StaticSource:
        """Build a source from a fleet file."""
        return cls(load_fleet_file(path), tokens)

    def fleet(self) -> Fleet:
        return self._fleet

    def table(self) -> RoutingTable | None:
        return None  # the core compiles the static table, residency applied

    def heartbeats(self, names: Sequence[str]) -> Mapping[str, Heartbeat]:
        with self._lock:
            return {n: self._heartbeats[n] for n in names if n in self._heartbeats}

    def locate(self, ip: str) -> ClientLocation:
        if self._locate is not None:
            return self._locate(ip)
        if self._locator is None and not self._locator_failed:
            try:
                self._locator = Locator()
            except (OSError, ValueError) as exc:  # no database (or no geoip2): run without
                self._locator_failed = True
                log.warning("no GeoIP database (%s): every client is unlocated", exc)
        return self._locator.locate(ip) if self._locator is not None else ClientLocation()

    def authenticate(self, token: str) -> ClientIdentity | None:
        with self._lock:
            return self._tokens.get(token_digest(token))

    def well_formed(self, token: str) -> bool:
        """Whether ``token`` could be one of the tokens given (no longer than the longest)."""
        return len(token) <= self._longest and plausible(token)

    def report_completions(self, items: Sequence[Completion]) -> None:
        self.reported.extend(items)

    def completions(self, region: str, after: str | None, count: int) -> Sequence[StreamEntry]:
        return ()  # nothing is shared between processes without a control plane

    # --- changes, for tests and drills without a control plane ---------------------------

    def set_fleet(self, fleet: Fleet) -> None:
        """Replace the fleet (seen by the core at its next ``maintain``)."""
        self._fleet = fleet

    def add_token(self, token: str, who: ClientIdentity) -> None:
        """Accept a new client token."""
        with self._lock:
            self._tokens[token_digest(token)] = who
            self._longest = max(self._longest, len(token))

    def revoke(self, token: str) -> None:
        """Stop accepting a token."""
        with self._lock:
            self._tokens.pop(token_digest(token), None)

    def set_heartbeat(self, beat: Heartbeat) -> None:
        """Record an endpoint's latest heartbeat."""
        with self._lock:
            self._heartbeats[beat.endpoint] = beat
