"""What the benchmarks share: processes, loopback ports, the compiled build, result files.

Every benchmark starts a peer the same way: pinned to a core with ``taskset`` when it exists
(routers on core 0, simulated servers and load generators on core 1) and, as root on a
machine shared with other work, at ``nice -n -10`` (``BENCH_NICE=0`` turns it off), the same
for every peer, so that the others' load delays every target less. Ports come from
``trafficmgr.testing.ports``, as the test suite's do.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trafficmgr.testing.ports import free_port

__all__ = [
    "NICE",
    "RESULTS",
    "ROOT",
    "compiled_env",
    "cpu_seconds",
    "free_port",
    "module",
    "pinned",
    "start",
    "stop",
    "wait_ready",
    "write_json",
]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
NICE = int(os.environ.get("BENCH_NICE", "-10"))


def module(name: str) -> list[str]:
    """Return the command that runs benchmark module ``name`` (``bench.x.y``) from the root."""
    return [sys.executable, "-m", name]


def pinned(cmd: list[str], cpu: str | None) -> list[str]:
    """Pin ``cmd`` to ``cpu``; as root on a shared machine also raise its priority."""
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpu, *cmd]
    if NICE and os.geteuid() == 0 and shutil.which("nice"):
        cmd = ["nice", "-n", str(NICE), *cmd]
    return cmd


def start(
    cmd: list[str], cpu: str | None, log: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` from the root, pinned, its output to ``log`` (or nowhere)."""
    out = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    environ = {**os.environ, **env} if env else None
    return subprocess.Popen(
        pinned(cmd, cpu), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=environ
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc``, killing it after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def wait_ready(port: int, path: str, timeout: float = 60.0) -> None:
    """Wait until ``GET path`` on loopback ``port`` answers 2xx."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                if s.recv(64).startswith(b"HTTP/1.1 2"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"nothing ready on port {port}{path}")


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) a process and its reaped children used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def compiled_env() -> dict[str, str]:
    """Return the environment that runs ``trafficmgr`` from the compiled build (built or
    rebuilt first by ``scripts/build_compiled.py``; the safe path keeps the checkout out)."""
    done = subprocess.run(
        [sys.executable, "scripts/build_compiled.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the compiled build failed:\n{done.stderr[-3000:]}")
    # the build first, so ``trafficmgr`` is the build's; the root after it, for ``bench``
    built = done.stdout.strip().splitlines()[-1]
    return {"PYTHONSAFEPATH": "1", "PYTHONPATH": f"{built}{os.pathsep}{ROOT}"}


def write_json(path: str | Path, doc: Any, indent: int | None = 2) -> Path:
    """Write ``doc`` as JSON to ``path`` (its directory made), and say where on stderr."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=indent) + "\n")
    print(f"results: {target}", file=sys.stderr)
    return target
