"""Keep a running server's fleet current: names, addresses, TTL and the static table.

Tables follow Redis within a tick, but the zone data (which models have names, each region's
ingress addresses, the TTL) comes from the fleet, and a server that read it once at start
would keep answering an address the operator has since moved, NXDOMAIN for a model added
since, and nothing for a new region the table already routes to. So a server given a
``FleetSource`` polls it every ``every_s`` seconds (in a thread: a database read or a YAML
parse must not stall answers) and swaps in a fleet that differs from the one it serves.

Fail static here too: a source that fails, or returns a fleet with no regions (an empty
database during a restore, a half-written file), leaves the current fleet in service; the
failure is logged once per streak and counted.

Sources are picklable (a class with ``__call__`` or a module-level function) so that
``--workers`` processes, started by spawning, can each follow the same one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Protocol

from trafficmgr.dns.metrics import Counters
from trafficmgr.routing.types import Fleet

log = logging.getLogger(__name__)

FleetSource = Callable[[], Fleet | None]  # None: unchanged since the last call
DEFAULT_EVERY_S = 5.0


class FleetUser(Protocol):
    """What the follower needs of a server."""

    counters: Counters

    @property
    def fleet(self) -> Fleet: ...

    def set_fleet(self, fleet: Fleet) -> None: ...


class FleetFile:
    """A fleet file, read again when its size or modification time changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None

    def __call__(self) -> Fleet | None:
        from trafficmgr.fleetfile import load_fleet_file

        info = os.stat(self.path)
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp == self._stamp:
            return None
        fleet = load_fleet_file(self.path)  # raises on a bad file: the stamp stays old
        self._stamp = stamp
        return fleet

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "_stamp": None}


def apply_fleet(server: FleetUser, fleet: Fleet | None) -> bool:
    """Serve ``fleet`` if it is new and usable; return whether it was swapped in."""
    if fleet is None or fleet == server.fleet:
        return False
    if not fleet.regions:
        raise ValueError("the fleet source holds no regions")
    server.set_fleet(fleet)
    return True


async def follow_fleet(
    server: FleetUser, source: FleetSource, every_s: float = DEFAULT_EVERY_S
) -> None:
    """Poll ``source`` forever, swapping in each changed fleet; failures keep the current one."""
    failing = False
    while True:
        await asyncio.sleep(every_s)
        try:
            fleet = await asyncio.to_thread(source)
            changed = apply_fleet(server, fleet)  # on the loop's thread: no query sees half a swap
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any source failure keeps the fleet served
            server.counters.add("fleet_errors")
            if not failing:
                log.warning("fleet source failed, serving the fleet as it was: %s", exc)
            failing = True
            continue
        if failing:
            log.info("fleet source readable again")
        failing = False
        if changed:
            server.counters.add("fleet_updates")
            log.info("fleet changed: %d regions", len(server.fleet.regions))
