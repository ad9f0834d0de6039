"""Real authoritative servers on 127.0.0.1 for the publisher tests: BIND 9, Knot, PowerDNS.

Each runs in the foreground from a temporary directory at free ports (no systemd, no
files outside the directory) and is stopped by the fixture that started it. A missing
binary skips the test with the package to install; CI (TRAFFICMGR_REQUIRE_SERVICES=1)
turns that skip into a failure, since the tests are marked ``integration``.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from trafficmgr.dns.publishers import TsigKey
from trafficmgr.testing.ports import TCP_AND_UDP, free_ports

ZONE = "infer.example.test."
PDNS_SCHEMA = Path("/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql")
# The Debian packages that carry each binary a test needs: the skip message names them (a
# guess from the binary's name, "apt-get install named-checkconf", names no package at all).
PACKAGES = {
    "named": "bind9 bind9-utils",
    "named-checkconf": "bind9-utils",
    "knotd": "knot knot-dnsutils",
    "knotc": "knot",
    "pdns_server": "pdns-server pdns-backend-sqlite3",
}
START_TIMEOUT_S = 10.0
ZONE_FILE = """$TTL 300
@    IN SOA ns1 hostmaster 1 3600 600 86400 10
@    IN NS  ns1
ns1  IN A   127.0.0.1
www  IN A   192.0.2.200
"""


def need(binary: str) -> str:
    """Return the path of a server binary, or skip the test naming the package to install."""
    path = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin")
    if path is None:
        pytest.skip(f"{binary} not installed (apt-get install {PACKAGES.get(binary, binary)})")
    return path


def new_key(name: str) -> TsigKey:
    return TsigKey(name, base64.b64encode(secrets.token_bytes(32)).decode())


@dataclass
class Running:
    """A server process started by a test."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log: Path
    api_port: int = 0

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def spawn(argv: Sequence[str], workdir: Path, port: int, api_port: int = 0) -> Running:
    log = workdir / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir
        )
    return Running(process, port, workdir, log, api_port)


def soa_serial(port: int, source: str = "127.0.0.1", zone: str = ZONE) -> int | None:
    """Return the zone's SOA serial as the server answers ``source``, or None."""
    query = dns.message.make_query(zone, "SOA")
    try:
        response = dns.query.udp(query, "127.0.0.1", port=port, source=source, timeout=0.5)
    except (dns.exception.Timeout, OSError):
        return None
    for rrset in response.answer:
        if rrset.rdtype == dns.rdatatype.SOA:
            return int(rrset[0].serial)
    return None


def wait_ready(server: Running, sources: Sequence[str] = ("127.0.0.1",)) -> None:
    """Wait until the zone's SOA is answered for every source (or fail with the log)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"server exited with {server.process.returncode}:\n{server.log_tail()}"
            )
        if all(soa_serial(server.port, s) is not None for s in sources):
            return
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"server not ready after {START_TIMEOUT_S} s:\n{server.log_tail()}")


# --- BIND 9: one view per client zone, each with its own key and zone file ------------


@dataclass(frozen=True)
class BindView:
    name: str
    key: TsigKey
    clients: str  # address match list element: "127.0.0.2", "any" (GeoIP ACLs in production)


def bind_config(workdir: Path, port: int, views: Sequence[BindView]) -> str:
    """Return a named.conf with the structure of deploy/bind/named.conf (address ACLs)."""
    keys = "".join(
        f'key "{v.key.name}" {{ algorithm {v.key.algorithm}; secret "{v.key.secret}"; }};\n'
        for v in views
    )
    blocks = []
    for view in views:
        others = "".join(f"!key {o.key.name}; " for o in views if o is not view)
        blocks.append(
            f'view "{view.name}" {{\n'
            f"  match-clients {{ {others}key {view.key.name}; {view.clients}; }};\n"
            f'  zone "{ZONE.rstrip(".")}" {{\n'
            f'    type primary; file "{workdir}/{view.name}.zone";\n'
            f"    update-policy {{ grant {view.key.name} zonesub A AAAA TXT; }};\n"
            f"    allow-transfer {{ key {view.key.name}; }};\n"
            "  };\n};\n"
        )
    return (
        "options {\n"
        f'  directory "{workdir}"; pid-file "{workdir}/named.pid";\n'
        f"  listen-on port {port} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }};\n"
        "  recursion no; dnssec-validation no; notify no;\n"
        f'  session-keyfile "{workdir}/session.key"; managed-keys-directory "{workdir}";\n'
        "};\ncontrols { };\n" + keys + "".join(blocks)
    )


def start_bind(workdir: Path, views: Sequence[BindView]) -> Running:
    named = need("named")
    (port,) = free_ports(1, TCP_AND_UDP)
    for view in views:
        (workdir / f"{view.name}.zone").write_text(ZONE_FILE)
    conf = workdir / "named.conf"
    conf.write_text(bind_config(workdir, port, views))
    server = spawn([named, "-g", "-n", "1", "-c", str(conf)], workdir, port)
    sources = [v.clients for v in views if v.clients != "any"] + ["127.0.0.1"]
    wait_ready(server, sources)
    return server


# --- Knot DNS --------------------------------------------------------------------------


def start_knot(workdir: Path, key: TsigKey, allow_transfer: bool = True) -> Running:
    knotd = need("knotd")
    (port,) = free_ports(1, TCP_AND_UDP)
    (workdir / "zone").mkdir()
    (workdir / "db").mkdir()
    (workdir / "zone" / f"{ZONE}zone").write_text(ZONE_FILE)
    actions = "[transfer, update]" if allow_transfer else "[update]"
    conf = workdir / "knot.conf"
    conf.write_text(
        f'server:\n  rundir: "{workdir}"\n  listen: 127.0.0.1@{port}\n'
        "  udp-workers: 1\n  tcp-workers: 1\n  background-workers: 1\n"
        "log:\n  - target: stderr\n    any: info\n"
        f'database:\n  storage: "{workdir}/db"\n'
        f"key:\n  - id: {key.name}\n    algorithm: {key.algorithm}\n    secret: {key.secret}\n"
        f"acl:\n  - id: publisher\n    key: {key.name}\n    action: {actions}\n"
        f'zone:\n  - domain: {ZONE}\n    storage: "{workdir}/zone"\n    file: "{ZONE}zone"\n'
        "    acl: publisher\n"
    )
    server = spawn([knotd, "-c", str(conf)], workdir, port)
    wait_ready(server)
    return server


# --- PowerDNS Authoritative (sqlite3 backend, HTTP API) -----------------------------------


def start_powerdns(workdir: Path, api_key: str, extra: Sequence[str] = ()) -> Running:
    pdns = need("pdns_server")
    port, api_port = free_ports(2, TCP_AND_UDP)
    database = pdns_database(workdir)
    settings = {
        "launch": "gsqlite3",
        "gsqlite3-database": str(database),
        "local-address": "127.0.0.1",
        "local-port": str(port),
        "api": "yes",
        "api-key": api_key,
        "webserver": "yes",
        "webserver-address": "127.0.0.1",
        "webserver-port": str(api_port),
        "webserver-allow-from": "127.0.0.0/8",
        "enable-lua-records": "yes",
        "socket-dir": str(workdir),
        "guardian": "no",
        "daemon": "no",
        "disable-syslog": "yes",
        "security-poll-suffix": "",
        "distributor-threads": "1",
        "receiver-threads": "1",
        "loglevel": "6",
    }
    (workdir / "pdns.conf").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    server = spawn([pdns, f"--config-dir={workdir}", *extra], workdir, port, api_port)
    wait_api(server)
    return server


def pdns_database(workdir: Path) -> Path:
    """Create an empty PowerDNS sqlite3 database from the packaged schema."""
    if not PDNS_SCHEMA.exists():
        pytest.skip(f"{PDNS_SCHEMA} missing (apt-get install {PACKAGES['pdns_server']})")
    database = workdir / "pdns.sqlite3"
    with sqlite3.connect(database) as db:
        db.executescript(PDNS_SCHEMA.read_text())
    return database


def wait_api(server: Running) -> None:
    """Wait until the PowerDNS webserver accepts connections."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"pdns_server exited:\n{server.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", server.api_port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"PowerDNS API not ready:\n{server.log_tail()}")
