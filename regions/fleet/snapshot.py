"""The fleet as the engine sees it, cached per process until the configuration changes.

Every configuration write bumps ``config-version`` in the hot state (signals in
``regions.models.heartbeats``); a process reloads ``fleet_snapshot()`` when the version it cached
differs, and at least every ``MAX_AGE_S`` in case a write bypassed the signals (a queryset
``update()``, or a command run against the embedded demo's SQLite from another shell).

The control loop reloads its view after a tick once it is within ``REFRESH_AHEAD_S`` of that
age (``refresh_ahead``), so the reload happens between ticks rather than inside one.

Fail static: when the database cannot be reached, the view held is used as it is (heartbeats,
decisions and ticks go on with the last configuration read) and reloaded once it answers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db import DatabaseError, connection, transaction

from regions import hotstate
from regions.hotstate import impairment
from trafficmgr.routing.table import static_table
from trafficmgr.routing.types import Endpoint, Fleet, RoutingTable

log = logging.getLogger(__name__)

MAX_AGE_S = 10.0
RETRY_S = 2.0  # while the database is away, how often a reload is tried
REFRESH_AHEAD_S = 3.0


@dataclass(frozen=True, slots=True)
class EndpointRef:
    """Where an endpoint lives in the database and in the engine's fleet."""

    pk: int
    region_pk: int
    endpoint: Endpoint


@dataclass(slots=True)
class FleetView:
    fleet: Fleet
    config_version: int
    loaded_at: float  # time.monotonic()
    endpoints: Mapping[str, EndpointRef]
    paused: frozenset[str]  # regions whose automatic failover an operator paused
    models: frozenset[str]  # every model some endpoint serves
    bindings: dict[tuple[int, int], bool] = field(default_factory=dict)  # (token, endpoint)
    _static: RoutingTable | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def static_table(self, now: float) -> RoutingTable:
        """Return the table from configuration alone (compiled once per view)."""
        with self._lock:
            if self._static is None:
                self._static = static_table(self.fleet, now)
            return self._static


_cached: FleetView | None = None
_lock = threading.Lock()


def load() -> FleetView:
    """Read the configuration now (a handful of queries, one database snapshot)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            # The queries share one snapshot: a read racing apply_fleet sees all of it or none.
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _load()


def _load() -> FleetView:
    from regions.fleet.services import fleet_snapshot
    from regions.models import Endpoint as EndpointRow
    from regions.models import Region as RegionRow

    version = hotstate.get().config_version()
    fleet = fleet_snapshot()
    engine = {e.name: e for e in fleet.endpoints()}
    refs = {
        name: EndpointRef(pk, region_pk, engine[name])
        for name, pk, region_pk in EndpointRow.objects.values_list("name", "pk", "region_id")
        if name in engine
    }
    paused = frozenset(
        RegionRow.objects.filter(failover_paused=True).values_list("name", flat=True)
    )
    return FleetView(fleet, version, time.monotonic(), refs, paused, frozenset(fleet.models()))


def current(max_age_s: float = MAX_AGE_S) -> FleetView:
    """Return the cached view, reloaded when the configuration changed or it is too old."""
    global _cached
    version = hotstate.get().config_version()
    view = _cached
    if (
        view is not None
        and view.config_version == version
        and (time.monotonic() - view.loaded_at < max_age_s)
    ):
        return view
    with _lock:
        view = _cached
        if (
            view is None
            or view.config_version != version
            or (time.monotonic() - view.loaded_at >= max_age_s)
        ):
            view = _cached = _reload(view)
        return view


def _reload(held: FleetView | None) -> FleetView:
    """Read the view again; keep the one held while the database is away."""
    database = impairment.database
    if held is None or not database.open:
        try:
            view = load()
        except DatabaseError:
            if held is None:
                raise
            database.failed()
            log.warning("fleet view: database unreachable, keeping the view read before")
        else:
            database.succeeded()
            return view
    held.loaded_at = time.monotonic() - max(0.0, MAX_AGE_S - RETRY_S)  # try again then
    return held


def refresh_ahead(ahead_s: float = REFRESH_AHEAD_S) -> bool:
    """Reload the cached view if it expires within ``ahead_s``; return whether it did."""
    global _cached
    view = _cached
    if view is None or time.monotonic() - view.loaded_at < MAX_AGE_S - ahead_s:
        return False
    with _lock:
        _cached = _reload(_cached)
    return True


def forget() -> None:
    """Drop the cached view (tests)."""
    global _cached
    _cached = None
