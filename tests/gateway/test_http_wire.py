"""The gateway's HTTP/1.1 server at the wire: raw sockets, the bytes a client could send.

Keep-alive and pipelining answered in order, HTTP/1.0, chunked request bodies, ``Expect:
100-continue``, and the bad inputs (not HTTP, oversized headers or bodies, unknown routes and
methods, a client that hangs up mid-stream): each a clear answer or a closed connection,
never a crash, and the gateway keeps serving others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time

import pytest

from tests.gateway.world import TOKEN, GatewayThread, ledger_drained
from trafficmgr.gateway.http import HttpProtocol
from trafficmgr.gateway.upstream import Connection

BODY = json.dumps(
    {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
).encode()


def connect(gateway: GatewayThread) -> socket.socket:
    host, port = gateway.origin.removeprefix("http://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def post(body: bytes = BODY, *, extra: str = "", version: str = "1.1") -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/{version}\r\nHost: gw\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def read_response(s: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    """Read one response (Content-Length or chunked) from ``s``; leftovers stay in ``buf``."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response; got {bytes(buf)!r}")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            buf += s.recv(65536)
        body = bytes(buf[:n])
        buf[:] = buf[n:]
        return status, headers, body
    body = b""
    while True:  # chunked
        while b"\r\n" not in buf:
            buf += s.recv(65536)
        size_line, _, rest = bytes(buf).partition(b"\r\n")
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += s.recv(65536)
        body += rest[:size]
        buf[:] = rest[size + 2 :]
        if size == 0:
            return status, headers, body


def closed(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_keep_alive_and_pipelined_requests_are_answered_in_order(
    gateway: GatewayThread,
) -> None:
    with connect(gateway) as s:
        buf = bytearray()
        s.sendall(post(extra="x-request-id: one\r\n") + post(extra="x-request-id: two\r\n"))
        first = read_response(s, buf)
        second = read_response(s, buf)
        assert (first[0], second[0]) == (200, 200)
        assert (first[1]["x-request-id"], second[1]["x-request-id"]) == ("one", "two")
        s.sendall(post())  # the same connection serves a third
        assert read_response(s, buf)[0] == 200
    assert ledger_drained(gateway.core) == 0


def test_http_10_and_connection_close_end_the_connection(gateway: GatewayThread) -> None:
    for raw in (post(version="1.0"), post(extra="Connection: close\r\n")):
        with connect(gateway) as s:
            s.sendall(raw)
            status, _, body = read_response(s, bytearray())
            assert status == 200 and json.loads(body)["choices"]
            assert closed(s)


def test_a_chunked_request_body_and_expect_continue(gateway: GatewayThread) -> None:
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
        f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n"
        "Expect: 100-continue\r\n\r\n"
    ).encode()
    with connect(gateway) as s:
        s.sendall(head)
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        half = len(BODY) // 2
        for part in (BODY[:half], BODY[half:]):
            s.sendall(b"%x\r\n%b\r\n" % (len(part), part))
        s.sendall(b"0\r\n\r\n")
        status, _, body = read_response(s, bytearray())
        assert status == 200, body


@pytest.mark.parametrize(
    "raw",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\n\r\n",
    ],
    ids=["tls", "version", "two-lengths", "negative-length", "nul"],
)
def test_what_is_not_http_gets_a_400_and_the_connection_closes(
    gateway: GatewayThread, raw: bytes
) -> None:
    with connect(gateway) as s:
        s.sendall(raw)
        status, _, body = read_response(s, bytearray())
        assert status == 400
        assert json.loads(body)["error"]["message"]
        assert closed(s)
    with connect(gateway) as s:  # and the gateway serves the next client
        s.sendall(post())
        assert read_response(s, bytearray())[0] == 200


def test_oversized_headers_get_a_431(gateway: GatewayThread) -> None:
    with connect(gateway) as s:
        s.sendall(post(extra="x-big: " + "a" * 70_000 + "\r\n"))
        status, _, _ = read_response(s, bytearray())
        assert status == 431
        assert closed(s)


@pytest.mark.parametrize(("size", "status"), [(15_000, 200), (17_000, 431)])
def test_the_head_cap_is_16_kib(gateway: GatewayThread, size: int, status: int) -> None:
    """A head of 16 KiB at most, as Node.js and h11 take: 60 KB junk bearer tokens on fresh
    connections left a worker's allocator holding some 90 MB under the old 64 KiB cap."""
    with connect(gateway) as s:
        s.sendall(post(extra="x-big: " + "a" * size + "\r\n"))
        assert read_response(s, bytearray())[0] == status


def test_a_body_past_the_limit_without_a_length_gets_a_413(gateway: GatewayThread) -> None:
    limit = gateway.settings.max_body_bytes
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
        f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    with connect(gateway) as s:
        s.sendall(head)
        block = b"x" * 65536
        sent = 0
        try:
            while sent <= limit:
                s.sendall(b"%x\r\n%b\r\n" % (len(block), block))
                sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway answered and closed before the rest arrived
        status, _, body = read_response(s, bytearray())
        assert status == 413, body
        assert json.loads(body)["error"]["code"] == "request_too_large"


def test_unknown_routes_and_methods_get_openai_shaped_404_and_405(
    gateway: GatewayThread,
) -> None:
    with connect(gateway) as s:
        buf = bytearray()
        s.sendall(b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\n\r\n")
        status, _, body = read_response(s, buf)
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
        s.sendall(b"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n")
        status, headers, body = read_response(s, buf)
        assert status == 405 and headers["allow"] == "POST"
        assert json.loads(body)["error"]["code"] == "method_not_allowed"


def test_a_client_hanging_up_mid_stream_frees_its_request(gateway: GatewayThread) -> None:
    stream = json.dumps(
        {
            "model": "m1",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    s = connect(gateway)
    s.sendall(post(stream))
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(65536)
    s.close()
    assert ledger_drained(gateway.core) == 0
    with connect(gateway) as again:
        again.sendall(post())
        assert read_response(again, bytearray())[0] == 200


def test_idle_connections_close_after_the_keepalive(gateway: GatewayThread) -> None:
    assert gateway.gateway is not None
    server = gateway.gateway.server
    before = server.limits
    server.limits = dataclasses.replace(before, keepalive_s=0.3)
    try:
        with connect(gateway) as s:
            s.sendall(post())
            assert read_response(s, bytearray())[0] == 200
            started = time.monotonic()
            assert closed(s, timeout=5)
            assert time.monotonic() - started < 4
    finally:
        server.limits = before


@pytest.mark.parametrize("cls", [HttpProtocol, Connection])
def test_the_connection_classes_answer_every_protocol_callback(cls: type) -> None:
    # They are asyncio protocols by their methods, not by subclassing asyncio.Protocol (the
    # compiled build may not subclass an interpreted class): a callback the loop makes and
    # the class lacks would be an AttributeError on a live connection (eof_received, when a
    # peer half-closes, was one).
    for callback in [*vars(asyncio.BaseProtocol), *vars(asyncio.Protocol)]:
        if not callback.startswith("_"):
            assert callable(getattr(cls, callback, None)), f"{cls.__name__}.{callback}"
