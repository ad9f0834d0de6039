"""``manage.py simulate_agents --control-plane URL``: one simulated agent per fleet endpoint.

For the distributed demo (docker-compose's ``agents`` service): the same agents
``manage.py demo`` runs in-process, pushing heartbeats over HTTP to the web service. On
real GPU nodes run ``trafficmgr-agent`` instead, one per node.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.audit.trail import acting_as
from regions.demo.embedded import start_simulated_agents, stop_agents
from regions.fleet.services import fleet_snapshot


class Command(BaseCommand):
    help = "Run one simulated agent per endpoint of the stored fleet until SIGTERM/Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--control-plane", required=True, help="URL of the web service")
        parser.add_argument("--load", type=float, default=0.4, help="offered load per node")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 < options["load"] <= 2:
            raise CommandError("--load must be > 0 and <= 2")
        fleet = fleet_snapshot()
        if not fleet.regions:
            raise CommandError("the database holds no regions: run apply_fleet first")
        with acting_as("simulate_agents", "cli", "cli"):
            agents = start_simulated_agents(fleet, options["control_plane"], options["load"])
        self.stdout.write(f"{len(agents)} simulated agents pushing to {options['control_plane']}")
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        done.wait()
        stop_agents(agents)
        self.stdout.write("simulated agents stopped.")
