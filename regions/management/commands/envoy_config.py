"""``manage.py envoy_config --listen HOST:PORT --epp HOST:PORT [--region NAME]``: print an Envoy
bootstrap for the stored fleet: the ext_proc filter calling trafficmgr's endpoint picker and
an ``override_host`` cluster that retries down its fallback list before the first byte.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.fleet.services import fleet_snapshot
from trafficmgr.epp.envoy_config import add_arguments, options_from_args, render


class Command(BaseCommand):
    help = "Print an Envoy bootstrap (ext_proc + override_host) for the stored fleet."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)
        parser.add_argument("--output", "-o", help="write here instead of standard output")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            text = render(fleet_snapshot(), options_from_args(argparse.Namespace(**options)))
        except (ValueError, KeyError) as exc:
            raise CommandError(str(exc)) from exc
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as out:
                out.write(text)
        else:
            self.stdout.write(text, ending="")
