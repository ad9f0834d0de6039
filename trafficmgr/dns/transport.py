"""asyncio protocols for DNS over UDP and TCP (RFC 1035 §4.2, RFC 7766).

Both call the responder synchronously: answering is pure CPU work with no I/O, so a
datagram is read, answered and sent without a task or a context switch. Datagrams go to
``Responder.handle_udp`` (its reply cache first), TCP messages to ``handle``. A blocking
receive loop in a thread of its own was measured against this reader and was no faster:
the event loop is idle while the socket is busy, and the reader drains a batch per wake-up.
TCP connections may pipeline queries, are closed after ``idle_timeout_s`` without a complete
query, and beyond ``max_connections`` new ones are closed at once. A client that does not
read its answers is cut off once too much is queued for it. Both time each answer for the
latency histogram (``metrics.Counters.latency``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from bisect import bisect_left
from collections.abc import Callable
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
    max_connections: int
    idle_timeout_s: float


class TcpConnection(asyncio.Protocol):
    """One TCP client: two-byte length-prefixed messages in and out."""

    def __init__(
        self,
        handle: Handler,
        limits: TcpLimits,
        registry: set[TcpConnection],
        counters: Counters,
    ) -> None:
        self._handle = handle
        self._limits = limits
        self._registry = registry
        self._counters = counters
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if len(self._registry) >= self._limits.max_connections:
            self._counters.add("tcp_rejected")
            transport.close()
            return
        self._counters.add("tcp_connections")
        self._registry.add(self)
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if peer else ""
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._limits.idle_timeout_s, self.close)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        buffer = self._buffer
        buffer += data
        if len(buffer) > MAX_BUFFER:
            self.close()
            return
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
                self.close()
                return
            transport.write(len(reply).to_bytes(2, "big") + reply)
            self._arm()
        if transport.get_write_buffer_size() > MAX_PENDING_WRITE:
            self.close()

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._registry.discard(self)
