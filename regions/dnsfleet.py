"""The stored fleet as a source for DNS servers to follow (``trafficmgr.dns.fleetwatch``).

``manage.py dnsserver`` reads the fleet from the database at start; ``StoredFleet`` lets each
of its processes read it again every few seconds, so an operator's change (a moved ingress
address, a new model or region) reaches the answers without a restart. It is picklable and
sets Django up itself, because ``--workers`` processes are spawned, not forked, and start
with nothing imported. Each read opens and closes its own connection: a poll every few
seconds per process is cheap, and an idle connection would only go stale between polls. The
queries share one snapshot, so a read racing ``apply_fleet`` sees it whole or not at all.
"""

from __future__ import annotations

from trafficmgr.routing.types import Fleet


class StoredFleet:
    """Read the fleet from the database (Django set up on first use in this process)."""

    def __call__(self) -> Fleet:
        import django
        from django.apps import apps

        if not apps.ready:
            django.setup()
        from django.db import connection, transaction

        from regions.services import fleet_snapshot

        try:
            with transaction.atomic():
                if connection.vendor == "postgresql":
                    # one snapshot for all the queries: never half of an apply_fleet
                    with connection.cursor() as cursor:
                        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return fleet_snapshot()
        finally:
            connection.close()
