"""DNS over TCP as RFC 7766 asks: pipelining, idle and partial-message timeouts, caps.

On real sockets (127.0.0.1, a free port). Before, the server had only a total cap and one
idle timer re-armed by complete queries: one client could take every slot, and nothing
timed a message begun, so a client trickling one byte at a time held its slot for the whole
idle timeout. Now connections are capped per client (an IPv4 address, an IPv6 /64) too, a
message begun must arrive whole within ``tcp_message_timeout_s``, and each refusal and each
close the server decides is counted by reason and exported per worker.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator

import dns.message
import pytest

from tests.dns.world import NAME, ZONE, query, quiet_config
from trafficmgr.dns.config import ServerConfig
from trafficmgr.dns.exporter import render, snapshot
from trafficmgr.dns.server import DnsServer, ServerThread
from trafficmgr.dns.transport import client_of

Start = Callable[..., ServerThread]
TIMEOUT = 3.0


@pytest.fixture
def start(make_server: Callable[..., DnsServer]) -> Iterator[Start]:
    threads: list[ServerThread] = []

    def run(config: ServerConfig) -> ServerThread:
        thread = ServerThread(make_server(config))
        threads.append(thread)
        thread.start()
        return thread

    yield run
    for thread in threads:
        thread.stop()


def connect(server: DnsServer) -> socket.socket:
    sock = socket.create_connection(server.address, timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def framed(message: dns.message.Message) -> bytes:
    wire = message.to_wire()
    return struct.pack("!H", len(wire)) + wire


def read_reply(sock: socket.socket) -> dns.message.Message:
    length = struct.unpack("!H", read_exactly(sock, 2))[0]
    return dns.message.from_wire(read_exactly(sock, length))


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None if it stayed open that long)."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def wait_for_count(server: DnsServer, event: str, n: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while server.metrics[event] < n:
        assert time.monotonic() < deadline, f"{event}: {server.metrics[event]} < {n}"
        time.sleep(0.01)


def test_pipelined_queries_in_one_write_and_split_across_writes_are_all_answered(
    start: Start,
) -> None:
    server = start(quiet_config()).server
    names = [(NAME, "A"), (NAME, "AAAA"), (NAME, "TXT"), (ZONE, "SOA"), (f"api.{ZONE}", "A")]
    messages = [query(n, t) for n, t in names * 4]
    for number, message in enumerate(messages, start=1):
        message.id = number  # distinct ids: random ones collide now and then (16 bits)
    with connect(server) as sock:
        sock.sendall(b"".join(framed(m) for m in messages))  # twenty queries, one write
        closing = query(ZONE, "NS")
        closing.id = len(messages) + 1
        last = framed(closing)
        sock.sendall(last[:7])  # and one split mid-message
        time.sleep(0.05)
        sock.sendall(last[7:])
        replies = [read_reply(sock) for _ in range(len(messages) + 1)]
    assert sorted(r.id for r in replies) == sorted([m.id for m in messages] + [replies[-1].id])
    by_id = {r.id: r for r in replies}
    for m in messages:
        assert by_id[m.id].question == m.question  # each answer matches its query


def test_connections_per_client_are_capped(start: Start) -> None:
    server = start(quiet_config(tcp_max_per_client=3, tcp_max_connections=50)).server
    held = [connect(server) for _ in range(3)]
    try:
        for sock in held:  # all three work
            sock.sendall(framed(query(NAME, "A")))
            assert read_reply(sock).answer
        extra = connect(server)
        assert closed_within(extra, TIMEOUT) is not None, "a fourth connection was kept"
        extra.close()
        wait_for_count(server, "tcp_rejected_per_client", 1)
        held.pop().close()  # one slot free again
        time.sleep(0.1)
        with connect(server) as again:
            again.sendall(framed(query(NAME, "A")))
            assert read_reply(again).answer
    finally:
        for sock in held:
            sock.close()
    assert server.metrics["tcp_rejected"] == 0


def test_connections_in_all_are_capped(start: Start) -> None:
    server = start(quiet_config(tcp_max_per_client=10, tcp_max_connections=2)).server
    held = [connect(server) for _ in range(2)]
    try:
        extra = connect(server)
        assert closed_within(extra, TIMEOUT) is not None
        extra.close()
        wait_for_count(server, "tcp_rejected", 1)
    finally:
        for sock in held:
            sock.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout(start: Start) -> None:
    server = start(quiet_config(tcp_idle_timeout_s=0.4, tcp_message_timeout_s=5.0)).server
    with connect(server) as sock:
        sock.sendall(framed(query(NAME, "A")))
        assert read_reply(sock).answer
        took = closed_within(sock, TIMEOUT)
    assert took is not None and 0.2 < took < 2.0, took
    wait_for_count(server, "tcp_closed_idle", 1)
    assert server.metrics["tcp_closed_partial"] == 0


def test_a_message_trickled_byte_by_byte_is_cut_off(start: Start) -> None:
    server = start(quiet_config(tcp_idle_timeout_s=10.0, tcp_message_timeout_s=0.5)).server
    wire = framed(query(NAME, "A"))
    with connect(server) as sock:
        sock.sendall(wire)  # a whole query first: the client is a real one
        assert read_reply(sock).answer
        start_at = time.monotonic()
        sent = 0
        try:
            for byte in wire:
                sock.sendall(bytes((byte,)))
                sent += 1
                time.sleep(0.1)  # the whole message would take ~3 s
        except (BrokenPipeError, ConnectionResetError):
            pass
        took = closed_within(sock, TIMEOUT)
        cut = time.monotonic() - start_at
    assert took is not None and cut < 2.0, (sent, cut)
    assert sent < len(wire)
    wait_for_count(server, "tcp_closed_partial", 1)
    assert server.metrics["tcp_closed_idle"] == 0


def test_refusals_and_closes_are_exported_by_reason(start: Start) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    server = start(quiet_config(tcp_max_per_client=1, tcp_idle_timeout_s=0.3)).server
    with connect(server) as first:
        extra = connect(server)
        closed_within(extra, TIMEOUT)
        extra.close()
        closed_within(first, TIMEOUT)  # idle
    wait_for_count(server, "tcp_closed_idle", 1)
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(render([("0", snapshot(server))]))
        for s in f.samples
    }
    refused = "trafficmgr_dns_tcp_refused_total"
    closed = "trafficmgr_dns_tcp_closed_total"
    assert found[(refused, (("reason", "per_client"), ("worker", "0")))] == 1
    assert found[(refused, (("reason", "max_connections"), ("worker", "0")))] == 0
    assert found[(closed, (("reason", "idle"), ("worker", "0")))] == 1
    assert found[(closed, (("reason", "partial"), ("worker", "0")))] == 0


def test_clients_are_counted_by_ipv4_address_and_ipv6_64() -> None:
    assert client_of("192.0.2.1") != client_of("192.0.2.2")
    assert client_of("2001:db8:1:2::1") == client_of("2001:db8:1:2:ffff::9")
    assert client_of("2001:db8:1:3::1") != client_of("2001:db8:1:2::1")
    assert client_of("::ffff:192.0.2.1") == client_of("192.0.2.1")
