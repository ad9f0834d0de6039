"""Differential fuzzing of the HTTP server's request framing against h11, the oracle.

Hypothesis writes sequences of valid HTTP/1.1 requests (methods, targets, headers, bodies by
``Content-Length`` or chunked, pipelined on one connection) and cuts the bytes at random
places; the server (``HttpProtocol`` on a transport that delivers the pieces, then a real
``HttpServer`` on loopback) and ``h11.Connection(our_role=SERVER)`` must read the same
requests: method, target, headers and body. A byte changed at random may make either refuse;
where both refuse, the server must not have served a request h11 did not read.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import h11
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.gateway.world import LoopThread
from trafficmgr.gateway.http import HttpProtocol, HttpServer, Request, Response

Seen = tuple[str, str, tuple[tuple[str, str], ...], bytes]  # method, target, headers, body

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
VALUE = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20
)
TARGET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/._-", max_size=30).map(
    lambda t: "/" + t
)
FRAMING_NAMES = {"content-length", "transfer-encoding", "connection", "host", "expect", "upgrade"}


@st.composite
def request_bytes(draw: st.DrawFn) -> bytes:
    """Return one valid HTTP/1.1 request."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]))
    target = draw(TARGET)
    names = draw(st.lists(TOKEN.filter(lambda n: n not in FRAMING_NAMES), max_size=4))
    headers = [("Host", "gw")] + [(n, draw(VALUE)) for n in names]
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["none", "length", "chunked"]))
    if framing == "none" or (framing == "length" and not body):
        body = b""
    head = f"{method} {target} HTTP/1.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    if framing == "length" or (framing == "none" and method in ("POST", "PUT", "PATCH")):
        head += f"Content-Length: {len(body)}\r\n"
    if framing == "chunked":
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        head += "Transfer-Encoding: chunked\r\n\r\n"
        chunks = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts if p)
        return head.encode() + chunks + b"0\r\n\r\n"
    return head.encode() + b"\r\n" + body


@st.composite
def pipelined(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Return requests on one connection and the places their bytes are cut."""
    data = b"".join(draw(st.lists(request_bytes(), min_size=1, max_size=5)))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=8))))
    return data, cuts


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *[c for c in cuts if 0 < c < len(data)], len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


def oracle(data: bytes) -> tuple[list[Seen], bool]:
    """Return the whole requests h11 reads from ``data`` and whether it refused the rest."""
    conn = h11.Connection(our_role=h11.SERVER)
    conn.receive_data(data)
    conn.receive_data(b"")  # the client closed after sending
    seen: list[Seen] = []
    current: h11.Request | None = None
    body = b""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            return seen, True
        if isinstance(event, h11.Request):
            current, body = event, b""
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert current is not None
            seen.append(_seen(current, body))
            conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
            conn.send(h11.EndOfMessage())
            conn.start_next_cycle()
        else:  # NEED_DATA, ConnectionClosed, PAUSED: all of it is read
            return seen, False


def _seen(request: h11.Request, body: bytes) -> Seen:
    joined: dict[str, str] = {}
    for name, value in request.headers:
        key, text = name.decode("latin-1"), value.decode("latin-1")
        joined[key] = f"{joined[key]}, {text}" if key in joined else text
    return (
        request.method.decode(),
        request.target.decode("latin-1"),
        tuple(sorted(joined.items())),
        body,
    )


async def record(seen: list[Seen], request: Request) -> Response:
    body = await request.read()
    seen.append((request.method, request.path, tuple(sorted(request.headers.items())), body))
    return Response(body=b"")


@dataclass
class PieceTransport:
    """A transport that hands the protocol what it is given, and honours pauses."""

    protocol: HttpProtocol
    written: bytearray = field(default_factory=bytearray)
    paused: bool = False
    closing: bool = False

    def write(self, data: bytes) -> None:
        self.written += data

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    abort = close


async def serve_pieces(parts: list[bytes]) -> tuple[list[Seen], bool]:
    """Feed ``parts`` to a server connection as its transport allows; return what it served
    and whether it closed the connection (a refusal: valid input never asks to close)."""
    seen: list[Seen] = []
    server = HttpServer(lambda r: record(seen, r), _refusal, max_body_bytes=1 << 20)
    protocol = HttpProtocol(server)
    transport = PieceTransport(protocol)
    protocol.connection_made(transport)  # type: ignore[arg-type]
    for part in parts:
        for _ in range(1000):  # reading resumes once the requests before are answered
            if not transport.paused or transport.closing:
                break
            await asyncio.sleep(0)
        assert not transport.paused or transport.closing, "reading never resumed"
        if transport.closing:
            break
        protocol.data_received(part)
        await asyncio.sleep(0)
    for _ in range(1000):
        if not protocol.busy or transport.closing:
            break
        await asyncio.sleep(0)
    return seen, transport.closing


def _refusal(status: int, message: str) -> Response:
    return Response(status=status, body=message.encode())


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def check(ours: tuple[list[Seen], bool], theirs: tuple[list[Seen], bool]) -> None:
    (served, refused), (read, h11_refused) = ours, theirs
    event(f"refused: ours {refused}, h11 {h11_refused}")
    if refused and h11_refused:
        assert served == read[: len(served)]  # nothing served that h11 did not read
    elif not refused and not h11_refused:
        assert served == read


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelined())
def test_pipelined_requests_cut_anywhere_read_as_h11_reads_them(
    loop: asyncio.AbstractEventLoop, case: tuple[bytes, list[int]]
) -> None:
    data, cuts = case
    served, refused = loop.run_until_complete(serve_pieces(pieces(data, cuts)))
    assert not refused
    assert served == oracle(data)[0]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelined(), st.integers(0, 10_000), st.binary(min_size=1, max_size=3))
def test_a_damaged_stream_is_refused_where_h11_refuses(
    loop: asyncio.AbstractEventLoop, case: tuple[bytes, list[int]], at: int, junk: bytes
) -> None:
    data, cuts = case
    at %= len(data)
    damaged = data[:at] + junk + data[at + len(junk) :]
    ours = loop.run_until_complete(serve_pieces(pieces(damaged, cuts)))
    check(ours, oracle(damaged))


@pytest.fixture(scope="module")
def real() -> Iterator[tuple[LoopThread, HttpServer, list[Seen], int]]:
    """A real server on loopback, recording what it serves."""
    thread, seen = LoopThread(), list[Seen]()

    async def start() -> tuple[HttpServer, int]:
        server = HttpServer(lambda r: record(seen, r), _refusal, max_body_bytes=1 << 20)
        return server, await server.start("127.0.0.1", 0)

    server, port = thread.call(start())
    yield thread, server, seen, port
    thread.call(server.stop(0.1))
    thread.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelined())
def test_a_real_socket_serves_what_h11_reads(
    real: tuple[LoopThread, HttpServer, list[Seen], int], case: tuple[bytes, list[int]]
) -> None:
    _, _, seen, port = real
    data, cuts = case
    expected = oracle(data)[0]
    seen.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for part in pieces(data, cuts):
            s.sendall(part)
        got = b""
        while got.count(b"HTTP/1.1 200 OK") < len(expected):
            chunk = s.recv(65536)
            assert chunk, f"closed after {got!r}"
            got += chunk
    assert seen == expected


def test_a_request_line_without_a_version_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    # found by the fuzzing above: llhttp reads "GET /x" as HTTP/0.9 and goes on to headers
    data = b"GET /x\r\nHost: gw\r\n\r\n"
    served, refused = loop.run_until_complete(serve_pieces([data]))
    assert (served, refused) == ([], True)
    assert oracle(data) == ([], True)
