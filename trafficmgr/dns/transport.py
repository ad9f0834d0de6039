"""asyncio protocols for DNS over UDP and TCP (RFC 1035 §4.2, RFC 7766).

Both call the responder synchronously: answering is pure CPU work with no I/O, so a
datagram is read, answered and sent without a task or a context switch. Datagrams go to
``Responder.handle_udp`` (its reply cache first), TCP messages to ``handle``. A blocking
receive loop in a thread of its own was measured against this reader and was no faster:
the event loop is idle while the socket is busy, and the reader drains a batch per wake-up.
TCP follows RFC 7766 (``TcpConnection``): queries may be pipelined, a connection is closed
after ``idle_timeout_s`` without a complete query or when a message begun does not arrive
whole within ``message_timeout_s``, and beyond ``max_connections`` in all or
``max_per_client`` from one client (an IPv4 address, an IPv6 /64) new ones are closed at
once. A client that does not read its answers is cut off once too much is queued for it.
Each refusal and each close the server decides is counted by reason. Both transports time
each answer for the latency histogram (``metrics.Counters.latency``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter

from trafficmgr.dns.metrics import LATENCY_BOUNDS_S, Counters

Handler = Callable[[bytes, str, bool], bytes | None]
DatagramHandler = Callable[[bytes, str], bytes | None]

MAX_PENDING_WRITE = 1 << 20
MAX_BUFFER = 2 * (65535 + 2)
MAX_DATAGRAM = 65535
BATCH = 64
RECEIVE_BUFFER = 4 << 20


class UdpReader:
    """Answers datagrams on a non-blocking socket, draining up to ``BATCH`` per wake-up.

    asyncio's own datagram transport reads one datagram per readiness event; reading a batch
    per event saves the event loop's round trip per query, which is most of the cost of a
    cached answer. A reply that does not fit the socket's send buffer is dropped, as the
    network would drop it; the client retries.
    """

    def __init__(self, sock: socket.socket, handle: DatagramHandler, counters: Counters) -> None:
        self.sock = sock
        self._handle = handle
        self._counters = counters

    def on_readable(self) -> None:
        recvfrom = self.sock.recvfrom
        sendto = self.sock.sendto
        handle = self._handle
        counters = self._counters
        latency = counters.latency
        start = perf_counter()  # one clock reading per datagram: from its read to its reply
        for _ in range(BATCH):
            try:
                data, addr = recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._counters.add("udp_errors")
                return
            reply = handle(data, addr[0])
            if reply is not None:
                try:
                    sendto(reply, addr)
                except OSError:  # buffer full (BlockingIOError) or the client's address is bad
                    self._counters.add("udp_errors")
            end = perf_counter()
            took = end - start
            latency[bisect_left(LATENCY_BOUNDS_S, took)] += 1
            counters.latency_sum += took
            start = end


def udp_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    """Return a bound, non-blocking UDP socket with a large receive buffer."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with contextlib.suppress(OSError):  # the kernel caps it at net.core.rmem_max
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True, slots=True)
class TcpLimits:
    """How many TCP clients a server keeps, and for how long (see ``config.ServerConfig``)."""

    max_connections: int
    idle_timeout_s: float
    max_per_client: int = 16
    message_timeout_s: float = 2.0


def client_of(address: str) -> str:
    """The per-client key of a TCP peer: its IPv4 address, or its IPv6 /64 (one host can
    hold a whole /64, so counting its addresses one by one would cap nothing)."""
    if ":" not in address:
        return address
    try:
        packed = socket.inet_pton(socket.AF_INET6, address.split("%", 1)[0])
    except OSError:
        return address
    if packed[:12] == b"\x00" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    return packed[:8].hex()


class TcpClients:
    """The open TCP connections, counted in total and per client."""

    def __init__(self, limits: TcpLimits) -> None:
        self.limits = limits
        self._open: set[TcpConnection] = set()
        self._per_client: dict[str, int] = {}

    def admit(self, connection: TcpConnection, client: str) -> str | None:
        """Count ``connection`` in; or return the event naming why it is refused."""
        if len(self._open) >= self.limits.max_connections:
            return "tcp_rejected"
        held = self._per_client.get(client, 0)
        if held >= self.limits.max_per_client:
            return "tcp_rejected_per_client"
        self._per_client[client] = held + 1
        self._open.add(connection)
        return None

    def remove(self, connection: TcpConnection, client: str) -> None:
        if connection not in self._open:
            return
        self._open.discard(connection)
        held = self._per_client.get(client, 0) - 1
        if held > 0:
            self._per_client[client] = held
        else:
            self._per_client.pop(client, None)

    def clients(self) -> int:
        """Return how many distinct clients hold a connection."""
        return len(self._per_client)

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[TcpConnection]:
        return iter(list(self._open))


class TcpConnection(asyncio.Protocol):
    """One TCP client: two-byte length-prefixed messages in and out (RFC 7766).

    Queries may be pipelined: every complete message in a read is answered, in the order
    received (RFC 7766 §6.2.1.1 allows any order; answering takes no I/O, so ours is the
    arrival order). The connection is closed ``idle_timeout_s`` after it was opened or last
    completed a query, when a message begun has not arrived whole within
    ``message_timeout_s`` of its first byte (a client trickling bytes to hold the slot), when
    it sends something that is not DNS, and when it does not read its answers.
    """

    def __init__(self, handle: Handler, clients: TcpClients, counters: Counters) -> None:
        self._handle = handle
        self._clients = clients
        self._limits = clients.limits
        self._counters = counters
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._client = ""
        self._idle: asyncio.TimerHandle | None = None
        self._partial: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if peer else ""
        self._client = client_of(self._peer)
        refused = self._clients.admit(self, self._client)
        if refused is not None:
            self._counters.add(refused)
            transport.close()
            return
        self._counters.add("tcp_connections")
        self._arm_idle()

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(self._limits.idle_timeout_s, self._expire, "tcp_closed_idle")

    def _expire(self, event: str) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._counters.add(event)
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        buffer = self._buffer
        buffer += data
        if len(buffer) > MAX_BUFFER:  # framing allows no more: a client sending unread
            self._drop("tcp_closed_unread")
            return
        answered = False
        while len(buffer) >= 2:
            length = int.from_bytes(buffer[:2], "big")
            if len(buffer) < 2 + length:
                break
            message = bytes(buffer[2 : 2 + length])
            del buffer[: 2 + length]
            start = perf_counter()
            reply = self._handle(message, self._peer, True)
            self._counters.observe(perf_counter() - start)
            if reply is None:  # not even a header: this is no DNS client
                self._drop("tcp_closed_garbage")
                return
            transport.write(len(reply).to_bytes(2, "big") + reply)
            answered = True
        if answered:
            self._arm_idle()
        self._watch_partial(bool(buffer), answered)
        if transport.get_write_buffer_size() > MAX_PENDING_WRITE:
            self._drop("tcp_closed_unread")

    def _watch_partial(self, pending: bool, answered: bool) -> None:
        """Time the message begun (from its first byte); forget the timer once none is."""
        if pending and (self._partial is None or answered):
            if self._partial is not None:
                self._partial.cancel()
            loop = asyncio.get_running_loop()
            self._partial = loop.call_later(
                self._limits.message_timeout_s, self._expire, "tcp_closed_partial"
            )
        elif not pending and self._partial is not None:
            self._partial.cancel()
            self._partial = None

    def _drop(self, event: str) -> None:
        self._counters.add(event)
        self.close()

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._idle, self._partial):
            if timer is not None:
                timer.cancel()
        self._idle = self._partial = None
        self._clients.remove(self, self._client)
