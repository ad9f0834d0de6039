"""``manage.py demo``: the embedded mode in one process (docs/architecture.md §4).

Migrates the database, applies the demo fleet, creates an operator login and an API
token, and serves the ASGI app with daphne until Ctrl-C; the run itself is ``regions.demo``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.demo.run import DEFAULT_DRILL, DemoOptions, DemoRun, Listen


class Command(BaseCommand):
    help = "Run the embedded demo: database, demo fleet, operator login and token, web server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--fleet",
            default=settings.TRAFFICMGR["FLEET_FILE"],
            help="fleet file to apply (default: %(default)s)",
        )
        parser.add_argument(
            "--http",
            default="127.0.0.1:8000",
            help="HOST:PORT of the web server (default: %(default)s)",
        )
        parser.add_argument(
            "--dns",
            default="127.0.0.1:5353",
            help="HOST:PORT of the GeoDNS server (default: %(default)s)",
        )
        parser.add_argument(
            "--gateway",
            default="127.0.0.1:8080",
            help="HOST:PORT of the OpenAI-compatible gateway (default: %(default)s)",
        )
        parser.add_argument(
            "--servers-port",
            type=int,
            default=8100,
            metavar="PORT",
            help="first port of the simulated inference servers, one per endpoint from there "
            "(0: any free ports; default: %(default)s)",
        )
        parser.add_argument(
            "--no-agents",
            action="store_true",
            help="do not start the simulated agents (nor the clients replaying a trace)",
        )
        parser.add_argument(
            "--rotate-credentials",
            action="store_true",
            help="issue a new operator password and API token (revoking the old token) instead "
            "of keeping the ones in var/demo-credentials.json",
        )
        parser.add_argument(
            "--drill",
            nargs="?",
            const=DEFAULT_DRILL,
            metavar="KIND:TARGET:SECONDS",
            help=f"run one failover drill once the system is up and print its report "
            f"(default when given alone: {DEFAULT_DRILL})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        DemoRun(demo_options(options), self.stdout).run()


def demo_options(options: dict[str, Any]) -> DemoOptions:
    """Check the command line; raise CommandError naming the flag at fault."""
    agents = not options["no_agents"]
    servers_port = int(options["servers_port"])
    if not 0 <= servers_port <= 65535:
        raise CommandError(f"--servers-port: {servers_port} is not a port (0-65535)")
    drill = None
    if options["drill"]:
        from regions.drills.tasks import parse_drill_flag

        try:
            drill = parse_drill_flag(options["drill"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if not agents:
            raise CommandError("--drill needs the simulated agents: drop --no-agents")
    return DemoOptions(
        http=Listen.parse(options["http"], "--http"),
        dns=Listen.parse(options["dns"], "--dns"),
        gateway=Listen.parse(options["gateway"], "--gateway"),
        agents=agents,
        servers_port=servers_port,
        fleet_file=options["fleet"],
        rotate=bool(options["rotate_credentials"]),
        drill=drill,
    )
