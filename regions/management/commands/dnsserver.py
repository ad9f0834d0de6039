"""``manage.py dnsserver [--listen HOST:PORT] [--fleet FILE] ...``: run the GeoDNS server.

A thin wrapper over ``trafficmgr.dns``: the fleet comes from the database (the stored
configuration, ``regions.fleet.services.fleet_snapshot``) unless ``--fleet`` names a file, and is
read again every ``--fleet-poll`` seconds so configuration changes reach the answers; the
GeoIP database, Redis and the state file default to the project's settings. Tables arrive
from Redis when ``REDIS_URL`` is set (the control loop publishes them there); without it the
server answers from the last persisted table or the static fleet, and ``--table-file``
can feed it. ``--metrics HOST:PORT`` serves every worker's counters as Prometheus text
(``trafficmgr.dns.exporter``); ``deploy/prometheus.yml`` scrapes it.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from trafficmgr.dns.cli import add_server_arguments, config_from_args
from trafficmgr.dns.config import DEFAULT_STATE_FILE
from trafficmgr.dns.fleetwatch import FleetFile, FleetSource
from trafficmgr.dns.server import DnsServer, serve
from trafficmgr.routing.types import Fleet


class Command(BaseCommand):
    help = "Run the authoritative GeoDNS server for the fleet's zone (UDP and TCP)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_server_arguments(parser, fleet_required=False)

    def handle(self, *args: Any, **options: Any) -> None:
        namespace = argparse.Namespace(**options)
        project = getattr(settings, "TRAFFICMGR", {})
        if namespace.geoip_db is None:
            namespace.geoip_db = project.get("GEOIP_DB") or getattr(
                settings, "TRAFFICMGR_GEOIP_DB", None
            )
        if namespace.redis_url is None:
            namespace.redis_url = getattr(settings, "REDIS_URL", None) or None
        if namespace.state_file == DEFAULT_STATE_FILE:
            namespace.state_file = str(settings.VAR_DIR / "dns-table.json")
        try:
            config = config_from_args(namespace)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        fleet = self._fleet(namespace.fleet)

        def ready(server: DnsServer) -> None:
            host, port = server.address
            self.stdout.write(f"GeoDNS for {fleet.zone} on {host}:{port} (udp+tcp)")
            if server.metrics_address is not None:
                where, at = server.metrics_address
                self.stdout.write(f"metrics on http://{where}:{at}/metrics")

        try:
            serve(fleet, config, ready, fleet_source=self._source(namespace.fleet))
        except OSError as exc:
            raise CommandError(f"cannot serve on {namespace.listen}: {exc}") from exc

    def _source(self, path: str | None) -> FleetSource:
        """Where each server process reads the fleet again (``--fleet-poll``)."""
        if path:
            return FleetFile(path)
        from regions.fleet.dnsfleet import StoredFleet

        return StoredFleet()

    def _fleet(self, path: str | None) -> Fleet:
        """Load the fleet from ``path``, else from the database."""
        if path:
            from regions.management.commands.apply_fleet import read_fleet

            return read_fleet(path)
        try:
            from regions.fleet.services import fleet_snapshot
        except ImportError as exc:
            raise CommandError("no fleet in the database here: give --fleet FILE") from exc
        fleet = fleet_snapshot()
        if not fleet.regions:
            raise CommandError("the database holds no regions: run apply_fleet or give --fleet")
        return fleet
