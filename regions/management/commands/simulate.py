"""``manage.py simulate --fleet FILE --trace FILE [--policies ...] --json OUT [--plot OUT.png]``.

The simulator's command line (``python -m trafficmgr.sim``) as a management command: the
same flags, taken from ``trafficmgr.sim.cli.build_parser``, and the same run
(``run_cli``), output and exit status; a bad fleet, trace or policy is a ``CommandError``
with exit status 2 after the reason on stderr. It reads files only: no database.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from trafficmgr.sim.cli import build_parser, run_cli


def _sim_actions() -> list[argparse.Action]:
    """Return the simulator parser's options (its own --help aside)."""
    return [a for a in build_parser()._actions if not isinstance(a, argparse._HelpAction)]


def sim_argv(options: dict[str, Any]) -> list[str]:
    """Turn parsed options back into the simulator's argument list."""
    argv: list[str] = []
    for action in _sim_actions():
        value = options.get(action.dest)
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif isinstance(action, argparse._AppendAction):
            for item in value or ():
                argv += [flag, str(item)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


class _Unstyled:
    """A text stream over a command's output wrapper that writes text exactly as given.

    (The wrapper would end every write with a newline and colour stderr: the progress bar
    redraws one line with carriage returns.)
    """

    def __init__(self, wrapper: OutputWrapper) -> None:
        self._wrapper = wrapper

    def write(self, text: str) -> int:
        self._wrapper.write(text, style_func=lambda s: s, ending="")
        return len(text)

    def flush(self) -> None:
        self._wrapper.flush()

    def isatty(self) -> bool:
        return bool(self._wrapper.isatty())


class Command(BaseCommand):
    help = build_parser().description or "Replay an LLM request trace against the fleet."
    requires_system_checks: list[str] = []  # files in, files out

    def add_arguments(self, parser: CommandParser) -> None:
        for action in _sim_actions():
            parser._add_action(action)

    def handle(self, *args: Any, **options: Any) -> None:
        out = cast(TextIO, _Unstyled(self.stdout))
        err = cast(TextIO, _Unstyled(self.stderr))
        status = run_cli(sim_argv(options), out, err)
        if status != 0:
            raise CommandError(f"simulation failed (exit status {status})", returncode=status)
