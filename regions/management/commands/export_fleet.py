"""``manage.py export_fleet [--output FILE]``: write the stored fleet as a fleet file."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.fleet.services import fleet_snapshot
from trafficmgr.fleetfile import dump_fleet


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` in one step, so a reader never sees half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fleet-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class Command(BaseCommand):
    help = "Write the stored fleet as a fleet file (to standard output, or --output FILE)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", "-o", help="write to FILE instead of standard output")

    def handle(self, *args: Any, **options: Any) -> None:
        fleet = fleet_snapshot()
        text = dump_fleet(fleet)
        output = options["output"]
        if not output or output == "-":
            self.stdout.write(text, ending="")
            return
        try:
            write_atomically(output, text)
        except OSError as exc:
            raise CommandError(f"{output}: cannot write ({exc.strerror})") from exc
        self.stdout.write(
            f"Wrote {len(fleet.regions)} regions and {len(fleet.endpoints())} "
            f"endpoints to {output}."
        )
