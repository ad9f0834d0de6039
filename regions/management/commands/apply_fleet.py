"""``manage.py apply_fleet FILE [--dry-run] [--force]``: print the plan, then apply it."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.audit.trail import acting_as, cli_actor
from regions.errors import DomainError
from regions.fleet.plan import apply_plan, plan_fleet
from trafficmgr.fleetfile import MAX_BYTES, FleetError, load_fleet_file, load_fleet_text
from trafficmgr.routing.types import Fleet


def describe_fleet_error(source: str, exc: FleetError) -> str:
    """Name the file, the path inside it and the line: one line for one problem, else a
    count followed by one line per problem."""
    if len(exc.issues) == 1:
        return f"{source}: {exc.issues[0]}"
    lines = [f"{source}: invalid fleet file ({len(exc.issues)} problems)"]
    lines += [f"  {source}: {issue}" for issue in exc.issues]
    return "\n".join(lines)


def read_fleet(source: str) -> Fleet:
    """Load a fleet file, or standard input for ``-``; problems become CommandErrors."""
    try:
        if source == "-":
            return load_fleet_text(sys.stdin.buffer.read(MAX_BYTES + 1))
        return load_fleet_file(source)
    except FleetError as exc:
        raise CommandError(describe_fleet_error(source, exc)) from exc
    except OSError as exc:
        raise CommandError(f"{source}: cannot read the fleet file ({exc.strerror})") from exc
    except (ValueError, RecursionError, MemoryError) as exc:  # a loader bug: still one line
        reason = f"{type(exc).__name__}: {exc}"[:200]
        raise CommandError(f"{source}: fleet: cannot read the fleet file ({reason})") from exc


class Command(BaseCommand):
    help = "Plan a fleet file against the stored fleet, print the plan and apply it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the fleet YAML file ('-' reads standard input)")
        parser.add_argument("--dry-run", action="store_true", help="print the plan only")
        parser.add_argument(
            "--force", action="store_true", help="apply even when the safety valve refuses the plan"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source = options["file"]
        desired = read_fleet(source)
        with acting_as(cli_actor(), "cli", "cli"):
            try:
                plan = plan_fleet(desired)
                self.stdout.write(plan.render(), ending="")
                if options["dry_run"]:
                    self.stdout.write("Dry run: nothing applied.")
                    return
                if plan.empty:
                    return
                applied = apply_plan(plan, force=options["force"])
            except FleetError as exc:
                raise CommandError(describe_fleet_error(source, exc)) from exc
            except DomainError as exc:
                raise CommandError(exc.detail) from exc
        self.stdout.write(self.style.SUCCESS(f"Applied: {applied.summary()}."))
