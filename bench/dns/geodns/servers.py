"""Start and stop the three servers on loopback, each in its own process."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import dns.exception
import dns.message
import dns.query

from bench.dns.geodns.competitors import write_gdnsd, write_powerdns
from bench.dns.geodns.plan import Plan

PDNS_GEOIP_MODULES = (
    "/usr/lib/x86_64-linux-gnu/pdns/libgeoipbackend.so",
    "/usr/lib/aarch64-linux-gnu/pdns/libgeoipbackend.so",
    "/usr/lib/pdns/libgeoipbackend.so",
)

# What each server needs, and the Debian package that provides it.
NEEDS = {
    "dnsperf": ("dnsperf", "dnsperf"),
    "dig": ("dig", "bind9-dnsutils"),
    "powerdns": ("pdns_server", "pdns-server"),
    "gdnsd": ("gdnsd", "gdnsd"),
}


def missing_packages(servers: list[str]) -> list[str]:
    """Return the Debian packages to install before the benchmark can run."""
    wanted = ["dnsperf", "dig", *[s for s in servers if s in NEEDS]]
    missing = [NEEDS[w][1] for w in wanted if shutil.which(NEEDS[w][0]) is None]
    if "powerdns" in servers and not any(Path(p).exists() for p in PDNS_GEOIP_MODULES):
        missing.append("pdns-backend-geoip")
    return missing


def free_port() -> int:
    """Return a loopback port free for both UDP and TCP."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port


@dataclass
class Running:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    pids: list[int] = field(default_factory=list)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def _wait_ready(running: Running, zone: str, timeout: float = 60.0) -> None:
    probe = dns.message.make_query(f"api.{zone}", "A")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            break
        try:
            dns.query.udp(probe, "127.0.0.1", port=running.port, timeout=0.5)
            return
        except (dns.exception.Timeout, OSError):
            time.sleep(0.1)
    running.stop()
    tail = running.log.read_text(errors="replace")[-2000:] if running.log.exists() else ""
    raise SystemExit(f"{running.name} did not start on port {running.port}:\n{tail}")


def start(
    name: str,
    plan: Plan,
    workdir: Path,
    geoip_db: Path,
    fleet_file: Path,
    root: Path,
    workers: int = 1,
    threads: int = 1,
    table_file: Path | None = None,
    code: Path | None = None,
) -> Running:
    """Start one server (``trafficmgr``, ``powerdns`` or ``gdnsd``) on a free loopback port.

    Ours (``trafficmgr``, or ``base``: the same from the tree ``code``) follows ``table_file``
    when one is given.
    """
    port = free_port()
    home = workdir / name
    home.mkdir(parents=True, exist_ok=True)
    if name in ("trafficmgr", "base"):
        args = [sys.executable, "-m", "trafficmgr.dns", "--fleet", str(fleet_file)]
        args += ["--listen", f"127.0.0.1:{port}", "--rrl-rate", "0", "--state-file", ""]
        args += ["--geoip-db", str(geoip_db), "--workers", str(workers), "--log-level", "WARNING"]
        args += ["--table-file", str(table_file)] if table_file else []
        root = code if name == "base" and code else root
    elif name == "powerdns":
        args = write_powerdns(plan, home, port, geoip_db, threads)
    elif name == "gdnsd":
        args = write_gdnsd(plan, home, port, geoip_db, threads)
    else:
        raise ValueError(name)
    log = home / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(args, cwd=root, stdout=out, stderr=subprocess.STDOUT)
    running = Running(name, port, process, log)
    _wait_ready(running, plan.zone)
    return running
