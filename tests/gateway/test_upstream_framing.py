"""Unusual framing from an endpoint: 1xx interim responses are skipped, not taken as the
answer; any byte after the end of a response is a protocol error, and that connection never
goes back to the pool; the head limits hold at their boundary."""

from __future__ import annotations

import asyncio

import pytest

from tests.gateway.test_upstream_client import Server, pool, read_request
from trafficmgr.gateway.upstream import UpstreamBroken, UpstreamPool

FINAL = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def answering(raw: bytes, then: bytes = b"", after_s: float = 0.0) -> Server:
    """Return a keep-alive server answering every request with ``raw`` (then ``then``,
    ``after_s`` later)."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(raw)
            await writer.drain()
            if then:
                await asyncio.sleep(after_s)
                writer.write(then)
                await writer.drain()

    return Server(reply)


@pytest.mark.parametrize(
    "interims",
    [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 100 Continue\r\n\r\n",
    ],
    ids=["100", "103-and-100"],
)
def test_interim_responses_are_skipped(interims: bytes) -> None:
    async def go() -> None:
        server = answering(interims, FINAL, 0.02)  # the interims in a read of their own
        async with server as address:
            p = pool()
            for _ in range(2):
                r = await p.post(address, "/", b"{}", {})
                assert r.status == 200
                assert "link" not in r.headers
                assert await r.read() == b"ok"
            assert server.connections == 1  # read whole: the connection was reused
            p.close()

    asyncio.run(go())


def test_switching_protocols_is_broken() -> None:
    async def go() -> None:
        raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
        async with answering(raw) as address:
            with pytest.raises(UpstreamBroken, match="switched protocols"):
                r = await pool().post(address, "/", b"{}", {})
                await r.read()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("then", "after_s"),
    [(FINAL, 0.0), (b"x", 0.0), (FINAL, 0.05)],
    ids=["second-response-same-read", "garbage-same-read", "second-response-later"],
)
def test_bytes_after_a_response_break_it_and_its_connection(then: bytes, after_s: float) -> None:
    async def go() -> None:
        # one write when the extra bytes come at once: they arrive in the read that ends
        # the response
        server = answering(FINAL + then if not after_s else FINAL, then, after_s)
        async with server as address:
            p = pool()
            r = await p.post(address, "/", b"{}", {})
            await asyncio.sleep(after_s * 2)  # the late bytes arrived before the body is read
            with pytest.raises(UpstreamBroken, match="after the end of the response"):
                await r.read()
            r = await p.post(address, "/", b"{}", {})
            assert server.connections == 2  # the broken connection was not pooled
            p.close()

    asyncio.run(go())


@pytest.mark.parametrize(("count", "ok"), [(5, True), (6, False)])
def test_the_header_count_limit_holds_at_its_boundary(count: int, ok: bool) -> None:
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(count - 1))
    raw = b"HTTP/1.1 200 OK\r\n" + headers + b"Content-Length: 2\r\n\r\nok"

    async def go() -> None:
        async with answering(raw) as address:
            p = UpstreamPool(1.0, 30.0, 4, max_headers=5, max_head_bytes=1024)
            if ok:
                r = await p.post(address, "/", b"{}", {})
                assert await r.read() == b"ok"
            else:
                with pytest.raises(UpstreamBroken, match="more than 5 response headers"):
                    await p.post(address, "/", b"{}", {})
            p.close()

    asyncio.run(go())


@pytest.mark.parametrize("size", [900, 2000, 200_000])
def test_the_head_size_limit_holds(size: int) -> None:
    raw = b"HTTP/1.1 200 OK\r\nX-Big: " + b"v" * size + b"\r\nContent-Length: 2\r\n\r\nok"

    async def go() -> None:
        async with answering(raw) as address:
            p = UpstreamPool(1.0, 30.0, 4, max_head_bytes=1024)
            if size < 1024:
                r = await p.post(address, "/", b"{}", {})
                assert await r.read() == b"ok"
            else:
                with pytest.raises(UpstreamBroken, match="head larger than 1024 bytes"):
                    await p.post(address, "/", b"{}", {})
            p.close()

    asyncio.run(go())
