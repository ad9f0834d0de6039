"""The one launcher of ``manage.py demo``: the whole system in one process on free ports.

Tests and benchmarks that need the demo start it here, so its command line (addresses, the
simulated servers' ports, the agents, the fleet) is spelled once; ``liveserver`` builds the
dashboard's server from the same ``demo_argv``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trafficmgr.testing.ports import TCP_AND_UDP, free_ports
from trafficmgr.testing.topology.processes import ROOT


@dataclass(frozen=True)
class DemoPorts:
    """The loopback ports of the demo's web app, DNS server and gateway."""

    web: int
    dns: int
    gateway: int

    @classmethod
    def free(cls) -> DemoPorts:
        """Return three distinct ports free now, for TCP and UDP alike (the DNS server's)."""
        web, dns, gateway = free_ports(3, TCP_AND_UDP)
        return cls(web, dns, gateway)


def demo_argv(
    ports: DemoPorts, *, agents: bool = True, fleet: Path | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """Return the command line of ``manage.py demo`` on ``ports``, its servers on any port."""
    argv = [sys.executable, "manage.py", "demo"]
    argv += ["--http", f"127.0.0.1:{ports.web}", "--dns", f"127.0.0.1:{ports.dns}"]
    argv += ["--gateway", f"127.0.0.1:{ports.gateway}", "--servers-port", "0"]
    if not agents:
        argv.append("--no-agents")
    if fleet is not None:
        argv += ["--fleet", str(fleet)]
    return [*argv, *extra]


class Demo:
    """``manage.py demo`` in a subprocess, its output collected line by line."""

    def __init__(
        self,
        env: Mapping[str, str],
        ports: DemoPorts | None = None,
        *,
        cwd: Path = ROOT,
        agents: bool = True,
        fleet: Path | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.env = dict(env)
        self.ports = ports or DemoPorts.free()
        self.url = f"http://127.0.0.1:{self.ports.web}"
        self.proc = subprocess.Popen(
            demo_argv(self.ports, agents=agents, fleet=fleet, extra=extra),
            cwd=cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, marker: str, timeout: float = 90.0) -> str:
        """Return the first output line holding ``marker``; fail with the output after
        ``timeout`` or once the demo exited without it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if marker in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {marker!r} in the demo's output:\n{self.output()[-4000:]}")

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C the demo and return its exit code; kill it (and fail) if it does not stop."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"demo still running {timeout:g} s after Ctrl-C:\n{self.output()[-4000:]}"
            ) from None
