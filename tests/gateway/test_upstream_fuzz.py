"""The gateway's client to the endpoints reads responses as h11 does: differential fuzzing.

Hypothesis builds responses — a status, headers, a body framed by ``Content-Length``, by
chunks or by the connection's end, 1xx interims before it, now and then one defect — and a
raw loopback server writes each in pieces cut at random bytes. What ``upstream.py`` reads
(status, headers, body) must be what ``h11.Connection(our_role=CLIENT)`` reads from the same
bytes; a response h11 refuses must be refused (``UpstreamBroken``) and its connection not
pooled. Stricter than h11 on purpose: bytes after the end of a response (h11 keeps them for
a next cycle) are refused too.
"""

from __future__ import annotations

import asyncio
import itertools
import string
from dataclasses import dataclass

import h11
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from trafficmgr.gateway.upstream import UpstreamBroken, UpstreamPool

Read = tuple[int, list[tuple[bytes, bytes]], bytes]

NAMES = st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=10).map(
    lambda s: "X-" + s
)
VALUES = st.text(string.ascii_letters + string.digits + " -_.,;=/", max_size=20).map(str.strip)
HEADERS = st.lists(st.tuples(NAMES, VALUES), max_size=5)
NO_BODY = (204, 304)
DEFECTS = ["short-body", "bad-chunk-size", "no-colon", "bad-status", "space-before-colon"]


@dataclass(frozen=True)
class Wire:
    """One response as bytes, with where to cut it and what follows it."""

    data: bytes
    cuts: tuple[int, ...]
    trailing: bytes


def head(version: str, status: int, headers: list[tuple[str, str]], defect: str | None) -> bytes:
    code = "2x0" if defect == "bad-status" else str(status)
    lines = [f"HTTP/{version} {code} Reason"]
    lines += [f"{k}: {v}" for k, v in headers]
    if defect == "no-colon":
        lines.append("X-Broken header line")
    if defect == "space-before-colon":
        lines.append("X-Spaced : v")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunked(body: bytes, sizes: list[int], defect: str | None) -> bytes:
    out, rest = [], body
    for size in sizes:
        if not rest:
            break
        part, rest = rest[: max(1, size)], rest[max(1, size) :]
        out.append(b"%x\r\n%b\r\n" % (len(part), part))
    if rest:
        out.append(b"%x\r\n%b\r\n" % (len(rest), rest))
    if defect == "bad-chunk-size":
        out.append(b"zz\r\nab\r\n")
    return b"".join(out) + b"0\r\n\r\n"


@st.composite
def wires(draw: st.DrawFn) -> Wire:
    version = draw(st.sampled_from(["1.1", "1.1", "1.0"]))
    status = draw(st.sampled_from([200, 201, 202, 204, 304, 400, 404, 429, 500, 503]))
    framing = draw(
        st.sampled_from(["length", "chunked", "close"] if version == "1.1" else ["length", "close"])
    )
    defect = draw(st.none() | st.sampled_from(DEFECTS))
    body = b"" if status in NO_BODY else draw(st.binary(max_size=300))
    headers = draw(HEADERS)
    interims = b""
    if version == "1.1":
        for code, extra in draw(
            st.lists(st.tuples(st.sampled_from([100, 102, 103]), HEADERS), max_size=2)
        ):
            interims += head("1.1", code, extra, None)
    if status in NO_BODY:
        framing = "none"
    elif framing == "length":
        headers.append(("Content-Length", str(len(body) + (5 if defect == "short-body" else 0))))
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        body = chunked(body, draw(st.lists(st.integers(1, 64), max_size=4)), defect)
    if framing == "close":
        headers.append(("Connection", "close"))
    data = interims + head(version, status, headers, defect) + body
    cuts = draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=5, unique=True))
    followed = framing in ("length", "chunked", "none") and draw(st.integers(0, 4)) == 0
    trailing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno" if followed else b""
    return Wire(data, tuple(sorted(c for c in cuts if c < len(data))), trailing)


def h11_reads(wire: Wire) -> Read | None:
    """Return what h11 reads from the wire (the server closing after it), None if it refuses."""
    conn = h11.Connection(our_role=h11.CLIENT)
    conn.send(
        h11.Request(method="POST", target="/", headers=[("Host", "x"), ("Content-Length", "2")])
    )
    conn.send(h11.Data(data=b"{}"))
    conn.send(h11.EndOfMessage())
    conn.receive_data(wire.data + wire.trailing)
    conn.receive_data(b"")
    status, headers, body = 0, [], b""
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status, headers = event.status_code, [(k, v) for k, v in event.headers]
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return None if conn.trailing_data[0] else (status, headers, body)
            elif not isinstance(event, h11.InformationalResponse):
                return None  # closed, or waiting for more than the server sent
    except h11.RemoteProtocolError:
        return None


async def we_read(wire: Wire) -> tuple[Read | None, int]:
    """Return what the upstream client reads from the wire, and its pooled connections."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        bounds = (0, *wire.cuts, len(wire.data))
        pieces = [wire.data[a:b] for a, b in itertools.pairwise(bounds)]
        pieces[-1] += wire.trailing  # in the read that ends the response
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.001)  # a read of its own, as far as the loop goes
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(1.0, 30.0, 4)
    try:
        response = await pool.post(f"127.0.0.1:{port}", "/", b"{}", {})
        body = await response.read()
        got: Read | None = (
            response.status,
            [(k.lower(), v) for k, v in response.raw_headers],
            body,
        )
    except UpstreamBroken:
        got = None
    idle = pool.idle_connections
    pool.close()
    server.close()
    return got, idle


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wires())
def test_the_client_reads_what_h11_reads(wire: Wire) -> None:
    expected = h11_reads(wire)
    event("h11 refuses" if expected is None else "h11 reads")
    got, idle = asyncio.run(we_read(wire))
    assert got == expected
    if expected is None:
        assert idle == 0  # a refused response's connection is not pooled


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_defect_is_refused_by_both(defect: str) -> None:
    """The generator's defects are defects: h11 refuses each, so the fuzz compares refusals."""
    headers = (
        [("Content-Length", "2")]
        if defect != "bad-chunk-size"
        else [("Transfer-Encoding", "chunked")]
    )
    body = b"ok" if defect != "bad-chunk-size" else chunked(b"ok", [], defect)
    data = head("1.1", 200, headers, defect) + body
    wire = Wire(data if defect != "short-body" else data[:-1], (), b"")
    assert h11_reads(wire) is None
    assert asyncio.run(we_read(wire))[0] is None
