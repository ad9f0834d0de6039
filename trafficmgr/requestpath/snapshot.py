"""The control plane's view as the request path holds it between two reads.

``read_snapshot`` asks the source for the fleet, the published table (or compiles the static
one before the first, residency applied, as the DNS servers and ``/route`` do) and the
heartbeats of the endpoints in scope, and builds each region's ``RegionView`` with the
engine's ``build_loads``. It may block on I/O: the core calls it from ``maintain``, off the
request path, and swaps the result in whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trafficmgr.requestpath.regionview import RegionView
from trafficmgr.requestpath.source import ControlPlane
from trafficmgr.routing.decision import build_loads
from trafficmgr.routing.table import static_table
from trafficmgr.routing.types import Endpoint, Fleet, Heartbeat, RegionState, RoutingTable


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Fleet, table and region views, as read at one moment."""

    fleet: Fleet
    table: RoutingTable
    table_kind: str  # "published" or "static"
    regions: Mapping[str, RegionView]
    endpoints: Mapping[str, Endpoint]  # every endpoint of the fleet, by name
    addresses: Mapping[str, str]  # host:port → endpoint name
    models: frozenset[str]
    pools: Mapping[str, tuple[str, ...]]  # endpoint → its ejection pool: all in scope
    beats: Mapping[str, Mapping[str, Heartbeat]]  # region → its endpoints' heartbeats


class StaticTables:
    """The static table of the latest fleet, compiled once per fleet."""

    def __init__(self) -> None:
        self._fleet: Fleet | None = None
        self._table: RoutingTable | None = None

    def get(self, fleet: Fleet, now: float) -> RoutingTable:
        if self._table is None or self._fleet is not fleet:
            self._fleet, self._table = fleet, static_table(fleet, now)
        return self._table


def read_snapshot(
    source: ControlPlane, region: str | None, now: float, statics: StaticTables
) -> Snapshot:
    """Read the control plane's view; ``region`` limits the views built to that region."""
    fleet = source.fleet()
    published = source.table()
    table = published if published is not None else statics.get(fleet, now)
    views: dict[str, RegionView] = {}
    all_beats: dict[str, Mapping[str, Heartbeat]] = {}
    for r in fleet.regions:
        if region is not None and r.name != region:
            continue
        status = table.regions.get(r.name)
        state = status.state if status is not None else RegionState.UNKNOWN
        beats = source.heartbeats([e.name for e in r.endpoints])
        views[r.name] = RegionView(r, state, build_loads(fleet, r, state, now, beats))
        all_beats[r.name] = beats
    endpoints = {e.name: e for e in fleet.endpoints()}
    scope = tuple(e.name for r in fleet.regions if r.name in views for e in r.endpoints)
    pools = dict.fromkeys(scope, scope)
    return Snapshot(
        fleet=fleet,
        table=table,
        table_kind="published" if published is not None else "static",
        regions=views,
        endpoints=endpoints,
        addresses={e.address: e.name for e in endpoints.values()},
        models=frozenset(fleet.models()),
        pools=pools,
        beats=all_beats,
    )
