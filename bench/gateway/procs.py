"""The processes of the gateway benchmarks: simulated servers, the gateway, vLLM Router.

Shared by ``bench/gateway/traces.py`` and ``bench/gateway/faults.py`` so that every
benchmark starts each peer the same way: the simulated fleet in one process (``python -m
trafficmgr.simserver``, free ports, the bound addresses read back from ``--write-addresses``),
the gateway (``python -m trafficmgr.gateway`` over a copy of the fleet file pointing at those
ports, loopback a trusted proxy) and vLLM Router (the PyPI wheel's ``vllm-router``, one
process per pool). Routers are pinned to core 0, the simulated servers and the load
generator to core 1 (``taskset``, when it exists), as ``bench/gateway/overhead.py`` does.
On a machine shared with other work they also run at a higher priority (``nice -n -10``, when
the benchmark runs as root; ``BENCH_NICE=0`` turns it off), the same for every peer, so that
the others' load delays every target less.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.suite import ROOT, free_port, module, pinned, start, stop, wait_ready
from trafficmgr.fleetfile import dump_fleet, load_fleet_file
from trafficmgr.routing.types import Fleet
from trafficmgr.simserver.layout import with_addresses

__all__ = ["ROOT", "free_port", "module", "pinned", "start", "stop", "wait_ready"]

TOKEN = "bench-token"
ROUTER_CPU = "0"
SIM_CPU = "1"


@contextmanager
def simulated_fleet(
    fleet_path: str, time_scale: float, extra: Sequence[str] = ()
) -> Iterator[tuple[Fleet, Path, dict[str, str]]]:
    """Serve every endpoint of the fleet; yield (fleet on loopback, its file, addresses)."""
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "addresses.json"
        cmd = [sys.executable, "-m", "trafficmgr.simserver", "--fleet", fleet_path,
               "--base-port", "0", "--time-scale", f"{time_scale:g}",
               "--write-addresses", str(where), *extra]  # fmt: skip
        proc = start(cmd, SIM_CPU, Path(tmp) / "simserver.log")
        try:
            deadline = time.monotonic() + 60
            while not where.exists() or not where.read_text().strip():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((Path(tmp) / "simserver.log").read_text()[-2000:])
                time.sleep(0.1)
            time.sleep(0.2)
            addresses: dict[str, str] = {
                name: a if isinstance(a, str) else f"{a[0]}:{a[1]}"
                for name, a in json.loads(where.read_text()).items()
            }
            fleet = with_addresses(load_fleet_file(fleet_path), addresses)
            path = Path(tmp) / "fleet.yaml"
            path.write_text(dump_fleet(fleet))
            for address in addresses.values():
                wait_ready(int(address.rsplit(":", 1)[1]), "/health")
            yield fleet, path, addresses
        finally:
            stop(proc)


@contextmanager
def gateway(fleet_file: Path, *args: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Run ``python -m trafficmgr.gateway`` over the fleet file; yield (port, process).

    Its first-byte timeout is vLLM Router's request timeout (1,800 s): a slowed-down
    simulation must not turn a long queue into a retry on one peer and a wait on the other.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(fleet_file),
           "--listen", f"127.0.0.1:{port}", "--token", TOKEN,
           "--trusted-proxy", "127.0.0.1", "--first-byte-timeout", "1800", *args]  # fmt: skip
    proc = start(cmd, ROUTER_CPU)
    try:
        wait_ready(port, "/healthz")
        yield port, proc
    finally:
        stop(proc)


def router_binary(given: str | None) -> str | None:
    """Return vLLM Router's binary: given, on PATH, or installed by scripts/peers/vllm_router.sh."""
    if given:
        return given
    found = shutil.which("vllm-router")
    if found:
        return found
    local = ROOT / "var" / "vllm-router-venv" / "bin" / "vllm-router"
    return str(local) if local.exists() else None


@contextmanager
def vllm_routers(
    binary: str, pools: dict[str, list[str]], policy: str
) -> Iterator[tuple[dict[str, int], list[subprocess.Popen[bytes]]]]:
    """Run one vLLM Router per pool (name → worker addresses); yield pool → port."""
    ports: dict[str, int] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, workers in pools.items():
            port = free_port()
            cmd = [binary, "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
                   "--worker-urls", *(f"http://{w}" for w in workers),
                   "--log-level", "error", "--prometheus-port", str(free_port())]  # fmt: skip
            procs.append(start(cmd, ROUTER_CPU))
            ports[name] = port
        for port in ports.values():
            wait_ready(port, "/health")
        yield ports, procs
    finally:
        for proc in procs:
            stop(proc)


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) a process has used; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def simserver_pid(addresses: dict[str, str]) -> list[int]:
    """Return the pid of the process listening on the first endpoint's port (via /proc)."""
    port = int(next(iter(addresses.values())).rsplit(":", 1)[1])
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # LISTEN
            inode = fields[9]
            break
    if inode is None:
        return []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return [int(proc.name)]
        except OSError:
            continue
    return []


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
