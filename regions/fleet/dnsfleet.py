"""The stored fleet as a source for DNS servers to follow (``trafficmgr.dns.fleetwatch``).

``manage.py dnsserver`` reads the fleet from the database at start; ``StoredFleet`` lets each
of its processes pick up later changes (a moved ingress address, a new model or region)
without a restart. It reads through ``regions.fleet.snapshot.current``, as the web and control-loop
processes do: the database is read again only when the configuration version in the hot
state moved or the view aged out, so most polls cost one Redis read and return None. It is
picklable and sets Django up itself, because ``--workers`` processes are spawned, not forked,
and start with nothing imported. The connection is closed after a poll: polls are seconds
apart, and an idle connection would only go stale in between.
"""

from __future__ import annotations

from trafficmgr.routing.types import Fleet


class StoredFleet:
    """The stored fleet when it changed since the last call, else None."""

    def __init__(self) -> None:
        self._last: Fleet | None = None

    def __call__(self) -> Fleet | None:
        import django
        from django.apps import apps

        if not apps.ready:
            django.setup()
        from django.db import connection

        from regions.fleet import snapshot

        try:
            fleet = snapshot.current().fleet
        finally:
            connection.close()
        if fleet is self._last:
            return None
        self._last = fleet
        return fleet

    def __getstate__(self) -> dict[str, object]:
        return {"_last": None}
