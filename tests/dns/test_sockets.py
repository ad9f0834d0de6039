"""The server on real sockets (127.0.0.1, a free port), queried with dns.query and dig."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.flags
import dns.query
import dns.rcode
import pytest

from tests.dns.test_truncation import fleet_with_many_addresses
from tests.dns.world import (
    EU_V4,
    GB,
    JP,
    NAME,
    US,
    US_V4,
    ZONE,
    addresses,
    ecs_of,
    everywhere,
    query,
    quiet_config,
    txt,
)
from trafficmgr.dns.config import ServerConfig
from trafficmgr.dns.server import DnsServer, ServerThread
from trafficmgr.routing.types import Fleet

TIMEOUT = 3.0

Start = Callable[..., ServerThread]


@pytest.fixture
def start(make_server: Callable[..., DnsServer]) -> Iterator[Start]:
    """Start servers in threads (``.server.address`` is where); stop them afterwards."""
    threads: list[ServerThread] = []

    def run(config: ServerConfig | None = None, **kw: object) -> ServerThread:
        thread = ServerThread(make_server(config or quiet_config(), **kw))
        threads.append(thread)
        thread.start()
        return thread

    yield run
    for thread in threads:
        thread.stop()


def test_udp_answers_with_and_without_ecs(start: Start) -> None:
    host, port = start().server.address
    reply = dns.query.udp(query(NAME, "A", ecs=(GB, 32)), host, port=port, timeout=TIMEOUT)
    assert reply.rcode() == dns.rcode.NOERROR and addresses(reply) <= EU_V4
    assert ecs_of(reply).scopelen == 24  # type: ignore[union-attr]
    plain = dns.query.udp(query(NAME, "A"), host, port=port, timeout=TIMEOUT)
    assert addresses(plain) and not plain.flags & dns.flags.RA


def test_tcp_answers_geo_and_txt(start: Start) -> None:
    host, port = start().server.address
    reply = dns.query.tcp(query(NAME, "A", ecs=(US, 32)), host, port=port, timeout=TIMEOUT)
    assert addresses(reply) <= US_V4 and addresses(reply)
    text = txt(dns.query.tcp(query(NAME, "TXT", ecs=(GB, 32)), host, port=port, timeout=TIMEOUT))
    assert "region=eu-" in text and "table=" in text


def test_tcp_connection_carries_several_queries(start: Start) -> None:
    host, port = start().server.address
    with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
        for rdtype in ("A", "AAAA", "TXT", "SOA"):
            name = ZONE if rdtype == "SOA" else NAME
            dns.query.send_tcp(sock, query(name, rdtype, ecs=(GB, 32)))
        replies = [dns.query.receive_tcp(sock, time.time() + TIMEOUT)[0] for _ in range(4)]
    assert [r.rcode() for r in replies] == [dns.rcode.NOERROR] * 4


def test_truncated_udp_answer_falls_back_to_tcp(start: Start, fleet: Fleet) -> None:
    host, port = start(fleet_=fleet_with_many_addresses(fleet, 30)).server.address
    message = query(NAME, "AAAA", ecs=(GB, 32), payload=512)
    udp_only = dns.query.udp(message, host, port=port, timeout=TIMEOUT, ignore_trailing=True)
    assert udp_only.flags & dns.flags.TC and not udp_only.answer
    reply, used_tcp = dns.query.udp_with_fallback(message, host, port=port, timeout=TIMEOUT)
    assert used_tcp and len(addresses(reply)) == 30


def test_restart_serves_the_persisted_table(start: Start, tmp_path: Path) -> None:
    config = quiet_config(state_file=str(tmp_path / "dns-table.json"))
    first = start(config)
    host, port = first.server.address
    first.server.set_table(everywhere([("us-west", 1.0)], version="before-restart"))
    reply = dns.query.udp(query(NAME, "A"), host, port=port, timeout=TIMEOUT)
    assert addresses(reply) == {"198.51.100.20"}
    first.stop()  # flushes the state file
    host, port = start(config).server.address  # no table source at all: only the state file
    reply = dns.query.udp(query(NAME, "TXT"), host, port=port, timeout=TIMEOUT)
    assert "table=before-restart source=state-file" in txt(reply)
    reply = dns.query.udp(query(NAME, "A"), host, port=port, timeout=TIMEOUT)
    assert addresses(reply) == {"198.51.100.20"}


def test_flood_from_one_source_is_limited_while_another_is_answered(start: Start) -> None:
    host, port = start(quiet_config(rrl_rate=50, rrl_burst=50, rrl_slip=0)).server.address
    wire = query(NAME, "A").to_wire()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
        flood.bind(("127.0.0.1", 0))
        flood.settimeout(0.5)
        for _ in range(300):
            flood.sendto(wire, (host, port))
        received = 0
        try:
            while True:
                flood.recv(2048)
                received += 1
        except TimeoutError:
            pass
    assert 50 <= received < 200
    bystander = dns.query.udp(
        query(NAME, "A"), host, port=port, timeout=TIMEOUT, source="127.0.1.1"
    )
    assert addresses(bystander)


def test_dig_gets_geo_answers(start: Start) -> None:
    dig = shutil.which("dig")
    if dig is None:
        pytest.skip("dig not installed (apt-get install dnsutils)")
    host, port = start().server.address
    base = [dig, f"@{host}", "-p", str(port), "+time=2", "+tries=1", "+short"]
    eu = subprocess.run(
        [*base, f"+subnet={GB}/32", NAME, "A"], capture_output=True, text=True, timeout=20
    )
    assert eu.returncode == 0 and set(eu.stdout.split()) <= EU_V4 and eu.stdout.strip()
    us = subprocess.run(
        [*base, "+tcp", f"+subnet={US}/29", NAME, "A"], capture_output=True, text=True, timeout=20
    )
    assert us.returncode == 0 and set(us.stdout.split()) <= US_V4 and us.stdout.strip()
    soa = subprocess.run([*base, ZONE, "SOA"], capture_output=True, text=True, timeout=20)
    assert soa.stdout.startswith(f"ns1.{ZONE}. hostmaster.{ZONE}.")


def test_ipv6_listener_locates_an_ipv6_client_by_ecs(start: Start) -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    host, port = start(quiet_config(host="::1")).server.address
    reply = dns.query.udp(query(NAME, "A", ecs=(JP, 48)), host, port=port, timeout=TIMEOUT)
    assert addresses(reply) == {"203.0.113.10"}
    reply = dns.query.tcp(query(NAME, "AAAA"), host, port=port, timeout=TIMEOUT)
    assert reply.rcode() == dns.rcode.NOERROR and addresses(reply)
