"""The demo's run: migrate, apply the fleet, serve the ASGI app with daphne until Ctrl-C.

Once the web server listens, the control loop, GeoDNS, the simulated agents and the demo's
request path start (``regions.demo.embedded``, ``regions.demo.traffic``); the running demo's
URL goes to ``var/demo.json`` and its log to ``var/demo.log`` (``regions.demo.files``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError, OutputWrapper

from regions.audit.trail import acting_as
from regions.demo import files
from regions.demo.banner import banner
from regions.demo.credentials import demo_credentials
from regions.demo.files import Credentials
from regions.fleet.plan import apply_plan, plan_fleet
from regions.management.commands.apply_fleet import read_fleet
from trafficmgr.fleetfile import parse_address

DEFAULT_DRILL = "region_outage:eu-west:20"
DEMO_TRACE = Path(settings.BASE_DIR) / "examples" / "traces" / "azure_code_2000.csv"


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, option: str) -> Listen:
        try:
            host, port = parse_address(text)
        except ValueError as exc:
            raise CommandError(f"{option} {text!r}: expected HOST:PORT ({exc})") from exc
        if port is None:
            raise CommandError(f"{option} {text!r}: expected HOST:PORT, the port is missing")
        return cls(host, port)

    def url(self) -> str:
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::"} else self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def allow_plain_http() -> None:
    """The demo serves plain HTTP: no HTTPS redirect, HSTS or secure-only cookies."""
    settings.SECURE_SSL_REDIRECT = False
    settings.SECURE_HSTS_SECONDS = 0
    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False


def check_free(listen: Listen) -> None:
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listen.host, listen.port))
        except OSError as exc:
            raise CommandError(f"cannot listen on {listen}: {exc.strerror}") from exc


@dataclass(frozen=True)
class DemoOptions:
    """What the command line asks of the demo, checked."""

    http: Listen
    dns: Listen
    gateway: Listen
    agents: bool
    servers_port: int
    fleet_file: str
    rotate: bool
    drill: tuple[str, str, float] | None


class DemoRun:
    """One run of the demo: prepared, then served until Ctrl-C, then stopped."""

    def __init__(self, options: DemoOptions, stdout: OutputWrapper) -> None:
        self.options = options
        self.stdout = stdout
        self.http, self.dns, self.gateway = options.http, options.dns, options.gateway
        self.agents = options.agents
        self.fleet_file = options.fleet_file
        self.drill = options.drill
        self.system: Any = None
        self.servers: Any = None
        self.traffic: Any = None

    def run(self) -> None:
        """Check the ports, prepare, and serve until Ctrl-C."""
        check_free(self.http)
        check_free(self.gateway)
        self.credentials = self.prepare()
        self.serve()

    def prepare(self) -> Credentials:
        """Migrate, apply the fleet, and issue the operator login and token."""
        from regions.demo.traffic import serve_endpoints

        desired = read_fleet(self.fleet_file)
        try:  # every endpoint served by a simulated server; the fleet names where
            self.servers, desired = serve_endpoints(desired, base_port=self.options.servers_port)
        except OSError as exc:
            raise CommandError(f"cannot start the simulated servers: {exc}") from exc
        self.served_fleet = desired
        call_command("migrate", interactive=False, verbosity=0)
        from regions.drills.service import rollback_dangling_drills

        for line in rollback_dangling_drills(pending_grace_s=0):
            self.stdout.write(f"rolled back drill {line}, left running by a process now gone")
        with acting_as("demo", "cli", "cli"):
            # The demo runs the file it was given, however far the stored fleet has drifted.
            plan = apply_plan(plan_fleet(desired), force=True)
            self.stdout.write(f"Fleet {self.fleet_file}: {plan.summary()}.")
            credentials = demo_credentials(self.options.rotate)
        self.zone = desired.zone
        self.endpoint_count = len(desired.endpoints())
        self.summary = (
            f"{len(desired.regions)} regions, {len(desired.endpoints())} endpoints, "
            f"models {', '.join(desired.models())}"
        )
        return credentials

    def serve(self) -> None:
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        allow_plain_http()
        from trafficmgr.asgi import application

        self.log_file = files.var_path(files.LOG_FILE)
        files.log_to_file(self.log_file)
        server = Server(
            application=ASGIStaticFilesHandler(application),
            endpoints=build_endpoint_description_strings(host=self.http.host, port=self.http.port),
            signal_handlers=True,
            ready_callable=self.ready,
        )
        try:
            server.run()
        finally:
            files.remove_run_file()
            if self.traffic is not None:
                self.traffic.stop()
            if self.system is not None:
                self.system.stop()
            if self.servers is not None:
                self.servers.stop()
        if not server.listening_addresses:
            raise CommandError(f"the web server could not listen on {self.http}")
        self.stdout.write("trafficmgr demo stopped.")

    def start_system(self) -> None:
        """Start the control loop, the GeoDNS server and the simulated agents."""
        from regions.demo.embedded import EmbeddedSystem
        from regions.fleet.services import fleet_snapshot

        self.system = EmbeddedSystem(
            fleet=fleet_snapshot(),
            web_url=self.http.url(),
            dns_host=self.dns.host,
            dns_port=self.dns.port,
            agents=self.agents,
            metrics_urls={
                e.name: f"http://{e.address}/metrics" for e in self.served_fleet.endpoints()
            },
        )
        self.system.start()
        self.start_traffic()
        from regions.drills import measure

        host = "127.0.0.1" if self.dns.host in {"0.0.0.0", "::"} else self.dns.host
        measure.configure(dns=(host, self.dns.port), http=self.http.url())
        if self.drill is not None:
            from regions.drills.tasks import start_when_ready

            kind, target, seconds = self.drill
            start_when_ready(
                kind,
                target,
                seconds,
                say=self.say,
                out_dir=Path(settings.VAR_DIR) / "drills",
            )

    def start_traffic(self) -> None:
        """Start the gateway, and clients replaying a trace through it when agents run."""
        from regions.demo.traffic import DEMO_RATE_RPS, DemoRequestPath, client_token

        with acting_as("demo", "cli", "cli"):
            secret = client_token()
        self.traffic = DemoRequestPath(
            self.served_fleet,
            self.gateway.host,
            self.gateway.port,
            secret,
            DEMO_TRACE if self.agents else None,
            rate_rps=DEMO_RATE_RPS,
        )
        self.gateway_url = self.traffic.start()
        self.client_secret = secret

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def ready(self) -> None:
        self.start_system()
        files.write_run_file(self.http.url(), str(self.dns))
        self.stdout.write(banner(self))
        self.stdout.flush()
