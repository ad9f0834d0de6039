"""Secrets a front starts with, from files or the environment rather than the command line.

Anything on a command line shows in the process list (``ps``, ``/proc/PID/cmdline``) to every
user of the machine, so the fronts read their secrets from elsewhere:

- client tokens (the standalone gateway and endpoint picker): ``--token-file PATH``, one a
  line (blank lines and ``#`` comments skipped), and ``TRAFFICMGR_CLIENT_TOKENS``, separated
  by commas or white space; both add to any ``--token``;
- the key sent to the endpoints (the gateway): ``--upstream-key-file PATH`` (its first line)
  or ``TRAFFICMGR_UPSTREAM_KEY``; ``--upstream-key`` and ``--upstream-key-file`` exclude each
  other, and either wins over the variable.

``--token`` and ``--upstream-key`` keep working, with a warning that they are visible. The
gateway's ``/metrics`` and ``/healthz`` detail take ``TRAFFICMGR_METRICS_TOKEN``, as the
control plane's ``/metrics`` does.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence

TOKENS_ENV = "TRAFFICMGR_CLIENT_TOKENS"
UPSTREAM_KEY_ENV = "TRAFFICMGR_UPSTREAM_KEY"
METRICS_TOKEN_ENV = "TRAFFICMGR_METRICS_TOKEN"  # the control plane's name for the same thing
_SEPARATORS = re.compile(r"[\s,]+")


def add_secret_flags(
    parser: argparse.ArgumentParser, *, tokens: bool = True, upstream_key: bool = True
) -> None:
    """Add ``--token-file`` and/or ``--upstream-key-file`` to a front's command line."""
    if tokens:
        parser.add_argument(
            "--token-file",
            action="append",
            default=[],
            metavar="PATH",
            help=f"client tokens, one a line (repeatable); also ${TOKENS_ENV}",
        )
    if upstream_key:
        parser.add_argument(
            "--upstream-key-file",
            metavar="PATH",
            help=f"the bearer token sent to the endpoints (first line); also ${UPSTREAM_KEY_ENV}",
        )


def read_secret_file(path: str, flag: str) -> list[str]:
    """Return the secrets of a file, one a line; raise ValueError naming ``flag``."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{flag}: cannot read {path}: {exc}") from None
    return [line for line in lines if line and not line.startswith("#")]


def client_tokens(
    given: Sequence[str], files: Sequence[str], environ: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """Return the client tokens from ``--token``, ``--token-file`` and the environment, and
    the warnings to print (a secret on the command line)."""
    tokens = list(given)
    for path in files:
        tokens += read_secret_file(path, "--token-file")
    tokens += [t for t in _SEPARATORS.split(environ.get(TOKENS_ENV, "")) if t]
    warnings = [visible("--token", "--token-file", TOKENS_ENV)] if given else []
    return list(dict.fromkeys(tokens)), warnings


def upstream_key(
    given: str | None, file: str | None, environ: Mapping[str, str]
) -> tuple[str | None, list[str]]:
    """Return the upstream key from ``--upstream-key``, its file or the environment, and the
    warnings to print; raise ValueError when both flags are given or the file is empty."""
    if given is not None and file is not None:
        raise ValueError("--upstream-key and --upstream-key-file: give one")
    if given is not None:
        return given, [visible("--upstream-key", "--upstream-key-file", UPSTREAM_KEY_ENV)]
    if file is not None:
        lines = read_secret_file(file, "--upstream-key-file")
        if not lines:
            raise ValueError(f"--upstream-key-file: {file} holds no key")
        return lines[0], []
    return environ.get(UPSTREAM_KEY_ENV, "").strip() or None, []


def metrics_token(environ: Mapping[str, str]) -> str | None:
    """Return the bearer token the gateway's operational endpoints require; None: open."""
    return environ.get(METRICS_TOKEN_ENV, "").strip() or None


def visible(flag: str, file_flag: str, variable: str) -> str:
    """The warning for a secret given on the command line."""
    return (
        f"{flag} shows in the process list to every user of this machine; "
        f"use {file_flag} or ${variable} instead"
    )
