"""The control plane as the request path sees it: the database and the hot state behind the
``ControlPlane`` protocol of ``trafficmgr.requestpath``.

The gateway and the Envoy endpoint picker never import the Django app; their management
commands hand the core one of these. Everything but ``authenticate`` and ``locate`` is called
from the core's ``maintain`` (a thread off the request path), so reading the database and
Redis here is fine; ``authenticate`` is called once per token the core has not cached yet.

- ``fleet``: the fleet view every web process routes over (``regions.fleet.snapshot``),
  reloaded when the configuration version moves;
- ``table``: the published table (None before the first tick: the core uses the static one);
- ``heartbeats``: the latest per endpoint, as the control loop stored them;
- ``authenticate``: active tokens of role ``client`` only (operators' and agents' tokens are
  not inference credentials), through the same cached check as the API (``access.auth``);
- completions go to the hot state's per-region stream, where ``/route`` workers and other
  gateways learn from them.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence

from django.db import close_old_connections, connection

from regions import conf, hotstate
from regions.access.auth import resolve_token, well_formed
from regions.access.tokens import API_PREFIX
from regions.fleet import snapshot
from regions.models import ApiToken, Role
from trafficmgr.contracts import Completion, StreamEntry
from trafficmgr.geoip import Locator
from trafficmgr.requestpath import ClientIdentity
from trafficmgr.routing.types import ClientLocation, Fleet, Heartbeat, RoutingTable

_locator: Locator | None = None
_locator_lock = threading.Lock()


def locate_ip(ip: str) -> ClientLocation:
    """Locate a client address with the GeoIP database (opened once per process)."""
    global _locator
    with _locator_lock:
        if _locator is None:
            _locator = Locator(conf.geoip_db())
        return _locator.locate(ip)


class DjangoControlPlane:
    """The stored fleet, the hot state and client tokens, for a gateway or endpoint picker."""

    def __init__(self) -> None:
        self._region_of: dict[str, str] = {}

    def fleet(self) -> Fleet:
        if not connection.in_atomic_block:  # a caller's transaction keeps its connection
            close_old_connections()  # called from a long-lived thread: drop a dead connection
        view = snapshot.current()
        self._region_of = {e.name: r.name for r in view.fleet.regions for e in r.endpoints}
        return view.fleet

    def table(self) -> RoutingTable | None:
        return hotstate.get().table()

    def heartbeats(self, names: Sequence[str]) -> Mapping[str, Heartbeat]:
        return hotstate.get().heartbeats(list(names))

    def locate(self, ip: str) -> ClientLocation:
        try:
            return locate_ip(ip)
        except (ValueError, OSError):
            return ClientLocation()

    def authenticate(self, token: str) -> ClientIdentity | None:
        close_old_connections()
        user = resolve_token(token)
        if user is None or user.role != Role.CLIENT:
            return None
        tenant = user.token.tenant if isinstance(user.token, ApiToken) else ""
        return ClientIdentity(user.name, tenant or None)

    def well_formed(self, token: str) -> bool:
        """Whether ``token`` is shaped like a client secret of ``create_token`` (no I/O)."""
        return token.startswith(API_PREFIX) and well_formed(token)

    def report_completions(self, items: Sequence[Completion]) -> None:
        by_region: dict[str, list[Completion]] = defaultdict(list)
        for c in items:
            region = self._region_of.get(c.endpoint)
            if region is not None:
                by_region[region].append(c)
        if by_region:
            hotstate.get().add_completions(by_region)

    def completions(self, region: str, after: str | None, count: int) -> Sequence[StreamEntry]:
        return hotstate.get().completions(region, after, count)
