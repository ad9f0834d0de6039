"""The HTTP server's flow control, deadlines and caps, with real sockets on loopback.

A client that pipelines without reading, a head or a body sent too slowly, an idle keep-alive
connection, too many connections (per worker and per client address), a client that stops
reading a stream: each is bounded or ended by the server, and a handler cut short is
cancelled. The last test goes through the whole gateway: the cancelled request's in-flight
slot is freed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TypeVar

import pytest

from tests.gateway.world import TOKEN, GatewayThread, LoopThread, ledger_drained, make_core
from trafficmgr.gateway import GatewaySettings
from trafficmgr.gateway.__main__ import parse_args
from trafficmgr.gateway.http import (
    FEED_BYTES,
    ClientLimits,
    HttpServer,
    Request,
    Response,
    StreamResponse,
)
from trafficmgr.gateway.settings import client_limits, networks
from trafficmgr.routing.types import Fleet

T = TypeVar("T")
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
ANSWER = b"x" * 1024  # large enough that unsent answers would pile up fast
ONE_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + ANSWER


@dataclass
class Served:
    """A plain server on its own loop, and what its handler saw."""

    loop: LoopThread
    server: HttpServer
    port: int
    cancelled: list[str] = field(default_factory=list)

    def state(self) -> list[tuple[int, int, bool | None]]:
        """Return (queued requests, write buffer bytes, reading paused) per connection."""

        async def read() -> list[tuple[int, int, bool | None]]:
            return [
                (
                    len(c._queue),
                    c.transport.get_write_buffer_size() if c.transport else 0,
                    getattr(c, "_read_paused", None),  # None: a server that never pauses
                )
                for c in self.server.connections
            ]

        return self.loop.call(read())

    def connect(self, rcvbuf: int | None = None) -> socket.socket:
        s = socket.socket()
        if rcvbuf is not None:  # before connecting: the window is agreed then
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(10)
        s.connect(("127.0.0.1", self.port))
        return s


async def handle(served: Served, request: Request) -> Response | StreamResponse:
    try:
        if request.path == "/healthz":
            return Response(body=ANSWER)
        if request.path == "/body":
            return Response(body=b"%d" % len(await request.read()))
        out = StreamResponse()  # /endless: a stream as fast as the client reads it
        await out.prepare(request)
        while True:
            await out.write(b"y" * 65536)
    except asyncio.CancelledError:
        served.cancelled.append(request.path)
        raise


def refusal(status: int, message: str) -> Response:
    return Response(status=status, body=message.encode())


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    """Start servers with the given limits on a loop of their own; stop them after."""
    made: list[Served] = []
    loop = LoopThread()

    def start(uncapped: tuple[str, ...] = (), **limits: float) -> Served:
        async def run() -> Served:
            served = Served(loop, None, 0)  # type: ignore[arg-type]
            served.server = HttpServer(
                lambda r: handle(served, r),
                refusal,
                max_body_bytes=1 << 20,
                limits=ClientLimits(**limits),  # type: ignore[arg-type]
                uncapped=networks(uncapped),
            )
            served.port = await served.server.start("127.0.0.1", 0)
            return served

        served = loop.call(run())
        made.append(served)
        return served

    yield start
    for served in made:
        loop.call(served.server.stop(0.1))
    loop.close()


def read_status(s: socket.socket) -> int:
    """Read one response's head and return its status (the body is left unread)."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed before a response; got {got!r}")
        got += chunk
    return int(got.split(b" ", 2)[1])


def is_closed(s: socket.socket) -> bool:
    """Read to the end; tell whether the server closed within the socket's timeout."""
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return False
    return True


def steady(sample: Callable[[], T], quiet_s: float = 0.5, limit_s: float = 30) -> T:
    """Return ``sample()`` once it has not changed for ``quiet_s``."""
    last, since, start = sample(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() - start < limit_s:
        time.sleep(0.05)
        now = sample()
        if now != last:
            last, since = now, time.monotonic()
    return last


def until(done: Callable[[], bool], limit_s: float = 30) -> bool:
    """Wait until ``done()``; return whether it came within ``limit_s``."""
    start = time.monotonic()
    while not done() and time.monotonic() - start < limit_s:
        time.sleep(0.02)
    return done()


def test_a_client_pipelining_without_reading_is_held_to_a_bounded_queue_and_buffer(
    serve: Callable[..., Served],
) -> None:
    served = serve(max_pipelined=2, write_timeout_s=60)
    count = 20_000  # 0.7 MB of requests asking for 20 MB of answers
    s = served.connect(rcvbuf=4096)
    sender = threading.Thread(target=s.sendall, args=(HEALTHZ * count,), daemon=True)
    sender.start()
    [(queued, buffered, paused)] = steady(served.state)
    # reading stopped: at most the limit waits, plus what one parsed slice held
    assert paused
    assert queued <= 2 + FEED_BYTES // len(HEALTHZ)
    # one answer past the transport's high-water mark (64 KiB), not the 20 MB asked for
    assert buffered <= 64 * 1024 + len(ANSWER) + 200
    # reading again, the client gets every answer
    got = 0
    while got < count * len(ONE_ANSWER):
        chunk = s.recv(1 << 20)
        assert chunk, f"closed after {got // len(ONE_ANSWER)} answers"
        got += len(chunk)
    sender.join(10)
    s.close()


def test_a_head_sent_too_slowly_gets_408(serve: Callable[..., Served]) -> None:
    served = serve(head_timeout_s=0.5, keepalive_s=30)
    with served.connect() as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        status = 0
        for _ in range(100):  # a byte every 0.1 s: arriving, never complete
            try:
                s.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.1)
            s.settimeout(0)
            try:
                status = read_status(s)
                break
            except BlockingIOError:
                pass
            finally:
                s.settimeout(10)
        assert status == 408
        assert is_closed(s)


def test_a_stalled_body_gets_408_and_cancels_its_handler(serve: Callable[..., Served]) -> None:
    served = serve(body_timeout_s=0.5, min_body_rate=1000, keepalive_s=30)
    with served.connect() as s:
        s.sendall(b"POST /body HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n" + b"a" * 10)
        assert read_status(s) == 408
        assert is_closed(s)
    assert served.cancelled == ["/body"]
    with served.connect() as s:  # a body that arrives is read as ever
        s.sendall(b"POST /body HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n" + b"a" * 1000)
        assert read_status(s) == 200


def test_idle_keep_alive_connections_close(serve: Callable[..., Served]) -> None:
    served = serve(keepalive_s=0.3)
    with served.connect() as s, served.connect() as silent:
        s.sendall(HEALTHZ)
        assert read_status(s) == 200
        assert is_closed(s)
        assert is_closed(silent)  # never sent a byte
    assert served.state() == []


def test_connections_past_the_worker_cap_get_503(serve: Callable[..., Served]) -> None:
    served = serve(max_connections=2)
    first, second = served.connect(), served.connect()
    for s in (first, second):
        s.sendall(HEALTHZ[:10])  # a request begun: neither connection is idle
    steady(served.state)
    with served.connect() as third:
        assert read_status(third) == 503
        assert is_closed(third)
    first.close()
    steady(served.state)  # the first one is gone: room for another
    with served.connect() as again:
        again.sendall(HEALTHZ)
        assert read_status(again) == 200
    second.close()


def test_a_full_worker_closes_its_longest_idle_connection_for_a_new_client(
    serve: Callable[..., Served],
) -> None:
    """Idle keep-alive connections (a flood of them from other addresses, say) give way to a
    new client instead of turning it away with a 503."""
    served = serve(max_connections=2)
    first, second = served.connect(), served.connect()
    for s in (first, second):
        s.sendall(HEALTHZ)
        assert read_status(s) == 200
    with served.connect() as third:
        third.sendall(HEALTHZ)
        assert read_status(third) == 200
        assert is_closed(first)  # idle the longest: closed to make room
        second.sendall(HEALTHZ)
        assert read_status(second) == 200
    first.close()
    second.close()


@pytest.mark.parametrize(("uncapped", "third"), [((), 503), (("127.0.0.0/8",), 200)])
def test_connections_past_the_per_client_cap_get_503_unless_from_a_proxy(
    serve: Callable[..., Served], uncapped: tuple[str, ...], third: int
) -> None:
    served = serve(uncapped=uncapped, max_per_client=2)
    held = [served.connect(), served.connect()]
    for s in held:
        s.sendall(HEALTHZ)
        assert read_status(s) == 200
    with served.connect() as s:
        s.sendall(HEALTHZ)
        assert read_status(s) == third
    for s in held:
        s.close()
    if not uncapped:
        assert steady(lambda: dict(served.server.per_client)) == {}


def test_a_client_that_stops_reading_is_cut_after_the_write_deadline(
    serve: Callable[..., Served],
) -> None:
    served = serve(write_timeout_s=0.5, keepalive_s=30)
    with served.connect(rcvbuf=4096) as s:
        s.sendall(b"GET /endless HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert until(lambda: served.cancelled == ["/endless"])
        assert served.state() == []


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[int]]]:
    """An endpoint streaming a chat completion without end, as fast as it is read; the
    second value counts the streams it started."""
    event = (
        b'data: {"id":"x","object":"chat.completion.chunk","choices":'
        b'[{"index":0,"delta":{"content":"' + b"w" * 900 + b'"}}]}\n\n'
    )
    loop, started = LoopThread(), [0]

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        started[0] += 1
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while True:
                writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            writer.close()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(run, "127.0.0.1", 0)

    server = loop.call(start())
    yield int(server.sockets[0].getsockname()[1]), started
    server.close()
    loop.close()


def test_a_stream_to_a_client_that_stops_reading_frees_its_in_flight_slot(
    fleet: Fleet, upstream: tuple[int, list[int]]
) -> None:
    port, started = upstream
    everywhere = replace(
        fleet,
        regions=tuple(
            replace(
                r, endpoints=tuple(replace(e, address=f"127.0.0.1:{port}") for e in r.endpoints)
            )
            for r in fleet.regions
        ),
    )
    core, _ = make_core(everywhere)
    limits = ClientLimits(write_timeout_s=0.5)
    settings = GatewaySettings(idle_timeout_s=600, client_limits=limits)
    body = json.dumps(
        {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    with GatewayThread(core, settings) as gw, socket.socket() as s:
        host, gw_port = gw.origin.removeprefix("http://").rsplit(":", 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(gw_port)))
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: "
            b"application/json\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        assert read_status(s) == 200
        # never read again: the gateway's writes back up and its deadline cuts the client
        assert ledger_drained(core, timeout_s=30) == 0
        assert started == [1]
        # ... and the connection too, unread: what was queued for it must not hold it open
        server = gw.gateway.server
        deadline = time.monotonic() + 10
        while server.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.connections


def test_the_limits_come_from_the_command_line_and_bad_ones_are_named() -> None:
    args = parse_args(["--fleet", "f.yaml", "--token", "t", "--head-timeout", "2.5"])
    assert client_limits(vars(args)) == ClientLimits(head_timeout_s=2.5)
    args = parse_args(["--fleet", "f.yaml", "--token", "t", "--max-pipelined", "0"])
    with pytest.raises(ValueError, match="--max-pipelined"):
        client_limits(vars(args))


def test_the_gateway_answers_a_slow_head_in_openai_shape(fleet: Fleet) -> None:
    core, _ = make_core(fleet)
    settings = GatewaySettings(client_limits=ClientLimits(head_timeout_s=0.3))
    with GatewayThread(core, settings) as gw:
        host, port = gw.origin.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert json.loads(body)["error"]["code"] == "request_timeout"
