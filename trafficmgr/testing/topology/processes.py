"""Processes of a local deployment: each in a session of its own, ended with its parent.

What every launcher here shares (``cluster``, ``liveserver``, ``privatepg``): polling with a
deadline that names what it waited for, process groups to signal, and docker-compose.yml's web
command, read from the file so that tests and benches run the web process exactly as deployed.
Their ports come from ``trafficmgr.testing.ports``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

T = TypeVar("T")

# Every child gets SIGTERM when the test process dies, however it dies (a timeout's SIGKILL
# skips every finally): Linux's prctl(PR_SET_PDEATHSIG), looked up here, before any fork, so
# that the child only makes the call.
PR_SET_PDEATHSIG = 1
try:
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def end_with_parent() -> None:
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def wait_until(check: Callable[[], T | None], timeout: float, what: str, every: float = 0.1) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
        except AssertionError:  # the check knows it is hopeless (e.g. the process exited)
            raise
        except Exception as exc:  # a service still starting: keep trying until the deadline
            value, last = None, exc
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f" (last error: {last!r})" if last is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(every)


def web_command(port: int, workers: int) -> list[str]:
    """docker-compose.yml's web command, on 127.0.0.1:``port`` with ``workers`` processes.

    Read from the compose file so that the tests run the web process exactly as deployed.
    """
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    argv = [str(arg) for arg in compose["services"]["web"]["command"]]
    given = {"--host": "127.0.0.1", "--port": str(port), "--workers": str(workers)}
    for flag, value in given.items():
        assert flag in argv, f"docker-compose.yml's web command has no {flag}: {argv}"
        argv[argv.index(flag) + 1] = value
    leftover = [arg for arg in argv if "$" in arg]
    assert not leftover, f"unresolved variables in the web command: {leftover}"
    return [str(BIN / argv[0]), *argv[1:]]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, chars: int = 2500) -> str:
        return self.text()[-chars:]


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
