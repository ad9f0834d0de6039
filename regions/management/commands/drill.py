"""``manage.py drill --kind K --target T --duration S [--json OUT] [--plot OUT.png]``.

Local (the default when ``REDIS_URL`` is set): the drill runs in this process against the
configured database and hot state, injecting through the agents the shared hot state
reaches; the DNS server asked is ``--dns`` (default 127.0.0.1:5353), route probes go to
``--http`` when given. Remote (``--server URL --token T``): the control plane runs it; this
command starts it, prints its progress and fetches the report. Without ``REDIS_URL`` the
hot state lives inside the running demo's process, so the command goes remote to the demo
with a short-lived operator token it issues in the shared database and revokes afterwards.
The demo is found at ``--server``, else ``$TRAFFICMGR_SERVER``, else the URL the running
demo wrote to ``var/demo.json`` (so ``demo --http 127.0.0.1:9000`` is found), else
http://127.0.0.1:8000.

Exit status: 0 pass, 1 fail, 2 aborted, 3 refused or invalid.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from regions.audit.trail import acting_as, cli_actor
from regions.demo import files as demofiles
from regions.drills import service
from regions.errors import DomainError

EXIT = {"pass": 0, "fail": 1, "aborted": 2}


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Treat SIGTERM (kill, timeout, a stopping container) like Ctrl-C while a drill runs, so
    the fault is rolled back now rather than when the reaper notices the runner is gone."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def parse_param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise CommandError(f"--param {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


class Command(BaseCommand):
    help = "Run a failover drill and report detection, DNS and recovery times."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kind", choices=service.KINDS)
        parser.add_argument("--target", help="region (or, for some kinds, endpoint) name")
        parser.add_argument("--duration", type=float, help="seconds the fault lasts (1..600)")
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="drill parameter, e.g. added_ms=800, fraction=0.5, recovery_wait_s=60",
        )
        parser.add_argument("--force", action="store_true", help="past the guardrails (admin)")
        parser.add_argument("--json", metavar="OUT", help="write the report as JSON")
        parser.add_argument("--plot", metavar="OUT.png", help="draw the timeline as a PNG")
        parser.add_argument(
            "--server",
            metavar="URL",
            help="run it on this control plane (default without REDIS_URL: $TRAFFICMGR_SERVER, "
            "else the running demo's URL from var/demo.json, else http://127.0.0.1:8000)",
        )
        parser.add_argument("--token", help="operator (or admin) API token for --server")
        parser.add_argument(
            "--dns",
            default="127.0.0.1:5353",
            metavar="HOST:PORT",
            help="local mode: the DNS server to ask (default %(default)s)",
        )
        parser.add_argument(
            "--http", metavar="URL", help="local mode: control plane base URL for route probes"
        )
        parser.add_argument("--abort", type=int, metavar="ID", help="abort drill ID and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        self.options = options
        if options["abort"] is not None:
            self.abort(options["abort"])
            return
        missing = [f"--{k}" for k in ("kind", "target", "duration") if options[k] is None]
        if missing:
            raise CommandError(f"{', '.join(missing)} required")
        params = dict(parse_param(p) for p in options["param"])
        body = {
            "kind": options["kind"],
            "target": options["target"],
            "duration_s": options["duration"],
            "params": params,
            "force": options["force"],
        }
        with sigterm_interrupts():
            if options["server"] or not getattr(settings, "REDIS_URL", ""):
                report = self.remote(body)
            else:
                report = self.local(body)
        self.deliver(report)

    def say(self, line: str) -> None:
        self.stdout.write(f"  {line}")
        self.stdout.flush()

    # --- local ----------------------------------------------------------------------------

    def local(self, body: dict[str, Any]) -> dict[str, Any]:
        from regions.drills.measure import MeasureSetup, parse_dns
        from regions.drills.runner import run_drill

        try:
            dns = parse_dns(self.options["dns"])
        except ValueError as exc:
            raise CommandError(f"--dns {self.options['dns']!r}: {exc}") from exc
        actor = cli_actor()
        with acting_as(actor, "cli", "cli"):
            try:
                drill = service.create_drill(
                    body["kind"],
                    body["target"],
                    body["duration_s"],
                    body["params"],
                    force=body["force"],
                    may_force=True,
                )
            except DomainError as exc:
                raise CommandError(exc.detail, returncode=3) from exc
            self.stdout.write(
                f"drill {drill.pk}: {drill.kind} on {drill.target} for "
                f"{drill.duration_s:g} s (local)"
            )
            try:
                report = run_drill(
                    drill.pk, MeasureSetup(dns=dns, route_url=self.options["http"]), self.say
                )
            except KeyboardInterrupt:
                # The runner restored the fault and ended the drill on its way out; abort it
                # here only if it had not got that far.
                with contextlib.suppress(DomainError):
                    service.abort_drill(drill.pk, "interrupted from the shell")
                raise CommandError(
                    f"drill {drill.pk} interrupted; fault rolled back", returncode=2
                ) from None
        if report is None:
            raise CommandError(f"drill {drill.pk} did not start", returncode=2)
        return report

    # --- remote ---------------------------------------------------------------------------

    def remote(self, body: dict[str, Any]) -> dict[str, Any]:
        from regions.drills.client import ApiError, DrillClient

        server, token = self.options["server"], self.options["token"]
        issued = None
        if not server or not token:
            if server and not token and getattr(settings, "REDIS_URL", ""):
                raise CommandError("--server needs --token")
            source = "--server"
            if not server:
                server, source = demofiles.server_url()
            issued, token = self.issue_token()
            self.stdout.write(
                f"the hot state lives in the demo's process: running the drill "
                f"through {server} (from {source}) with a temporary operator token"
            )
        client = DrillClient(server, token)
        try:
            try:
                started = client.start(body)
            except ApiError as exc:
                raise CommandError(f"{exc} ({exc.status})", returncode=3) from None
            except OSError as exc:
                raise CommandError(
                    f"cannot reach {server}: {exc} (is the demo running? "
                    "give --server URL --token T)",
                    returncode=3,
                ) from None
            drill_id = int(started["id"])
            region = started["params"]["resolved"]["region"]
            self.stdout.write(
                f"drill {drill_id}: {body['kind']} on {body['target']} for "
                f"{body['duration_s']:g} s on {server}"
            )
            wait = body["duration_s"] + service.MAX_RECOVERY_WAIT_S + 60
            try:
                doc = client.follow(drill_id, region, self.say, wait)
            except KeyboardInterrupt:
                with contextlib.suppress(ApiError):  # it may have ended meanwhile
                    client.abort(drill_id)
                self.stdout.write("interrupted: drill aborted, fault rolled back")
                doc = client.follow(drill_id, region, self.say, 30)
        finally:
            if issued is not None:
                issued.revoked_at = timezone.now()
                issued.save(update_fields=["revoked_at"])
        report: dict[str, Any] | None = doc.get("report")
        if report is None:
            raise CommandError(
                f"drill {drill_id} is {doc['status']} without a report yet", returncode=2
            )
        return report

    def issue_token(self) -> tuple[Any, str]:
        from regions.access.issue import create_token

        with acting_as(cli_actor(), "cli", "cli"):
            return create_token("manage.py drill (temporary)", "operator", created_by=cli_actor())

    def abort(self, drill_id: int) -> None:
        if self.options["server"]:
            from regions.drills.client import ApiError, DrillClient

            try:
                DrillClient(self.options["server"], self.options["token"] or "").abort(drill_id)
            except ApiError as exc:
                raise CommandError(str(exc), returncode=3) from None
        else:
            with acting_as(cli_actor(), "cli", "cli"):
                try:
                    service.abort_drill(drill_id)
                except DomainError as exc:
                    raise CommandError(exc.detail, returncode=3) from exc
        self.stdout.write(f"drill {drill_id} aborted; its instructions are cancelled")

    # --- output ---------------------------------------------------------------------------

    def deliver(self, report: dict[str, Any]) -> None:
        if self.options["json"]:
            Path(self.options["json"]).write_text(json.dumps(report, indent=2) + "\n")
        if self.options["plot"]:
            from regions.drills.plot import plot_report

            plot_report(report, self.options["plot"])
        self.stdout.write(summary(report))
        code = EXIT.get(report["verdict"], 1)
        if code:
            sys.stdout.flush()
            raise CommandError(f"verdict {report['verdict']}", returncode=code)


def _s(value: Any) -> str:
    return "—" if value is None else f"{value:.2f} s"


def summary(report: dict[str, Any]) -> str:
    """A reader's table of a report."""
    moves = report.get("dns_changed_after_s") or {}
    per = ", ".join(f"{k} {_s(v)}" for k, v in moves.items()) or "no vantage served by it"
    targets = report.get("targets") or {}
    rows = [
        f"{report['kind']} on {report['target']}: {report['verdict'].upper()}",
        f"  fault at               {report['fault_at']}"
        + (
            f" (delivered {_s(report.get('delivery_s'))} after the injection)"
            if report.get("delivery_s") is not None
            else ""
        ),
        f"  detected after         {_s(report['detected_after_s'])}"
        + (f"  (target {targets['detected_s']:g} s)" if targets else ""),
        f"  table changed after    {_s(report['table_changed_after_s'])}",
        f"  traffic shifted after  {_s(report.get('traffic_shifted_after_s'))}",
        f"  DNS moved after        {_s(report['dns_changed_after_s_max'])}"
        + (f"  (target {targets['dns_moved_s']:g} s)" if targets else "")
        + f"  [{per}]",
        f"  recovered after        {_s(report['recovered_after_s'])}",
        f"  wrong answers          {report['wrong_answers']}",
        f"  residency violations   {report['residency_violations']}",
        "  reasons:",
        *[f"    - {r}" for r in report["reasons"]],
    ]
    return "\n".join(rows)
