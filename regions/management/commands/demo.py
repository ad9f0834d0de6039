"""``manage.py demo``: the embedded mode in one process (docs/architecture.md §4).

Migrates the database, applies the demo fleet, creates an operator login and an API
token, and serves the ASGI app with daphne until Ctrl-C.

The login and the token are kept in ``var/`` and survive a restart (``--rotate-credentials``
issues new ones); the running demo's URL is in ``var/demo.json`` for ``manage.py drill`` and
others; the log goes to ``var/demo.log`` so that the banner with the credentials stays on
screen (``regions.management.demofiles``).
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from regions.access.issue import create_token
from regions.access.tokens import hash_secret
from regions.audit.trail import acting_as
from regions.fleet.plan import apply_plan, plan_fleet
from regions.management import demofiles
from regions.management.commands.apply_fleet import read_fleet
from regions.management.demofiles import Credentials
from regions.models import ApiToken, Role
from trafficmgr.fleetfile import parse_address

DEMO_USER = "operator"
DEMO_TOKEN = "demo operator"
DEFAULT_DRILL = "region_outage:eu-west:20"


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


def ensure_role_groups() -> dict[str, Group]:
    return {role: Group.objects.get_or_create(name=role)[0] for role in Role.values}


def reset_operator_login(password: str | None = None) -> str:
    """Create (or reset) the ``operator`` login in group operator with ``password`` (a new one
    when None); return the password."""
    groups = ensure_role_groups()
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=DEMO_USER)
    password = password or secrets.token_urlsafe(12)
    if not user.check_password(password):  # leaves the sessions of an unchanged login alone
        user.set_password(password)
    user.is_active = True
    user.save()
    user.groups.set([groups[Role.OPERATOR]])
    return password


def new_operator_token() -> str:
    """Revoke earlier demo tokens and issue a fresh operator token."""
    for old in ApiToken.objects.filter(name=DEMO_TOKEN, revoked_at__isnull=True):
        old.revoked_at = timezone.now()
        old.save(update_fields=["revoked_at"])
    _, secret = create_token(DEMO_TOKEN, Role.OPERATOR, created_by="demo")
    return secret


def kept_operator_token(secret: str) -> str:
    """Keep the token of an earlier run: stored again if the database is new, replaced by a new
    one if it was revoked (someone meant it) or is no operator token."""
    row = ApiToken.objects.filter(key_hash=hash_secret(secret)).first()
    if row is None:
        ApiToken.objects.create(
            name=DEMO_TOKEN,
            role=Role.OPERATOR,
            prefix=secret[:12],
            key_hash=hash_secret(secret),
            created_by="demo",
        )
        return secret
    if row.revoked_at is None and row.role == Role.OPERATOR:
        return secret
    return new_operator_token()


def demo_credentials(rotate: bool) -> Credentials:
    """The operator login and token: the ones kept in ``var/`` unless ``rotate``."""
    kept = None if rotate else demofiles.load_credentials()
    if kept is None:
        credentials = Credentials(DEMO_USER, reset_operator_login(), new_operator_token())
    else:
        credentials = Credentials(
            DEMO_USER, reset_operator_login(kept.password), kept_operator_token(kept.token)
        )
    demofiles.save_credentials(credentials)
    return credentials


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


DEMO_TRACE = Path(settings.BASE_DIR) / "examples" / "traces" / "azure_code_2000.csv"


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
        self.http = Listen.parse(options["http"], "--http")
        self.dns = Listen.parse(options["dns"], "--dns")
        self.gateway = Listen.parse(options["gateway"], "--gateway")
        self.agents = not options["no_agents"]
        self.servers_port = int(options["servers_port"])
        if not 0 <= self.servers_port <= 65535:
            raise CommandError(f"--servers-port: {self.servers_port} is not a port (0-65535)")
        self.fleet_file = options["fleet"]
        self.rotate = bool(options["rotate_credentials"])
        self.drill = None
        if options["drill"]:
            from regions.drills.tasks import parse_drill_flag

            try:
                self.drill = parse_drill_flag(options["drill"])
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            if not self.agents:
                raise CommandError("--drill needs the simulated agents: drop --no-agents")
        self.system: Any = None
        self.servers: Any = None
        self.traffic: Any = None
        check_free(self.http)
        check_free(self.gateway)
        self.credentials = self.prepare()
        self.serve()

    def prepare(self) -> Credentials:
        """Migrate, apply the fleet, and issue the operator login and token."""
        from regions.demotraffic import serve_endpoints

        desired = read_fleet(self.fleet_file)
        try:  # every endpoint served by a simulated server; the fleet names where
            self.servers, desired = serve_endpoints(desired, base_port=self.servers_port)
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
            credentials = demo_credentials(self.rotate)
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

        self.log_file = demofiles.var_path(demofiles.LOG_FILE)
        demofiles.log_to_file(self.log_file)
        server = Server(
            application=ASGIStaticFilesHandler(application),
            endpoints=build_endpoint_description_strings(host=self.http.host, port=self.http.port),
            signal_handlers=True,
            ready_callable=self.ready,
        )
        try:
            server.run()
        finally:
            demofiles.remove_run_file()
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
        from regions.embedded import EmbeddedSystem
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
        from regions.demotraffic import DEMO_RATE_RPS, DemoRequestPath, client_token

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
        demofiles.write_run_file(self.http.url(), str(self.dns))
        self.banner()

    def banner(self) -> None:
        url, c = self.http.url(), self.credentials
        auth = f'-H "Authorization: Bearer {c.token}"'
        lines = [
            "",
            f"trafficmgr demo is running on {url}/  (Ctrl-C stops it)",
            f"  fleet      {self.fleet_file}: {self.summary}",
            f"  database   {os.path.normpath(str(settings.DATABASES['default']['NAME']))}",
            f"  dashboard  {url}/      login: {c.username}   password: {c.password}",
            f"  API docs   {url}/api/docs/",
            f"  API token  {c.token}   (role operator)",
            f"  GeoDNS     {self.dns} (udp+tcp), zone {self.zone}",
            f"  gateway    {self.gateway_url}  (OpenAI base URL)",
            f"  client     {self.client_secret}   (a client token for the gateway)",
            f"  servers    {self.endpoint_count} simulated inference servers on 127.0.0.1 "
            "(vLLM's API and /metrics)",
            "  agents     "
            + (
                f"{self.endpoint_count} simulated agents replaying a real trace"
                if self.agents
                else "off (--no-agents)"
            ),
            f"  loop       control-loop tick every {settings.TRAFFICMGR['TICK_SECONDS']:g} s",
            f"  log        {self.log_file}   (here: warnings and errors only)",
            f"  kept in    {demofiles.var_path(demofiles.CREDENTIALS_FILE)}: the same login and "
            "token after a restart (--rotate-credentials for new ones)",
            "",
            "Try:",
            f"  curl {url}/healthz",
            f"  curl {auth} {url}/api/v1/regions/",
            f"  curl {auth} {url}/api/v1/fleet/export",
            f"  curl {auth} {url}/api/v1/routing/table",
            f"  curl {auth} -X POST {url}/api/v1/route -H 'Content-Type: application/json' "
            '-d \'{"model": "llama-3-70b", "client_ip": "81.2.69.142", "input_tokens": 1800, '
            '"max_output_tokens": 256}\'',
            f"  curl {self.gateway_url}/chat/completions -H 'Authorization: Bearer "
            f"{self.client_secret}' -H 'Content-Type: application/json' "
            '-d \'{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}], '
            '"max_tokens": 16}\' -i',
            f"  dig @{self.dns.host} -p {self.dns.port} llama-3-70b.{self.zone} "
            "+subnet=81.2.69.0/24",
            f"  dig @{self.dns.host} -p {self.dns.port} llama-3-70b.{self.zone} TXT "
            "+subnet=216.160.83.0/24",
            "",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
