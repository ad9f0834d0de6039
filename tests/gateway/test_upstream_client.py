"""The gateway's client to the endpoints, against raw loopback servers that misbehave on cue:
connections reused and dropped, bodies by length, chunks or the connection's end, garbage,
refusals, big bodies read with back-pressure, and a response abandoned half-read."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from trafficmgr.gateway.upstream import (
    HIGH_WATER,
    ConnectFailed,
    UpstreamBroken,
    UpstreamPool,
)

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)


class Server:
    """A loopback server; ``reply`` answers each connection; counts connections."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.reply(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def pool() -> UpstreamPool:
    return UpstreamPool(1.0, 30.0, 16, {"Content-Type": "application/json"})


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
        await writer.drain()


def test_connections_are_reused() -> None:
    async def go() -> None:
        server = Server(keep_alive)
        async with server as address:
            p = pool()
            for i in range(5):
                r = await p.post(address, "/v1/x", b"n%d" % i, {"X-Request-Id": str(i)})
                assert r.status == 200 and await r.read() == b"n%d" % i
            assert server.connections == 1
            p.close()

    asyncio.run(go())


def test_a_connection_the_server_closed_while_idle_is_not_used() -> None:
    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async def go() -> None:
        server = Server(one_then_close)
        async with server as address:
            p = pool()
            for _ in range(3):
                r = await p.post(address, "/", b"{}", {})
                assert await r.read() == b"ok"
                await asyncio.sleep(0.05)  # the server's close reaches the pool
            assert server.connections == 3
            p.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("raw", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", b"until the end"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", b"abc"),
    ],
    ids=["close-delimited", "chunked"],
)
def test_bodies_by_the_connection_end_and_by_chunks(raw: bytes, body: bytes) -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()

    async def go() -> None:
        async with Server(reply) as address:
            r = await pool().post(address, "/", b"{}", {})
            assert r.headers.get("content-type", "text/plain") == "text/plain"
            assert await r.read() == body

    asyncio.run(go())


@pytest.mark.parametrize(
    "raw",
    [b"SSH-2.0-OpenSSH_9.6\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"],
    ids=["garbage", "cut-short"],
)
def test_garbage_or_a_cut_body_is_broken(raw: bytes) -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()

    async def go() -> None:
        async with Server(reply) as address:
            with pytest.raises(UpstreamBroken):
                r = await pool().post(address, "/", b"{}", {})
                await r.read()

    asyncio.run(go())


def test_a_refused_connection_is_a_connect_failure() -> None:
    async def go() -> None:
        async with Server(keep_alive) as address:
            pass  # closed: nothing listens there now
        with pytest.raises(ConnectFailed, match="cannot connect"):
            await pool().post(address, "/", b"{}", {})

    asyncio.run(go())


def test_a_big_body_is_read_whole_through_back_pressure() -> None:
    size = 8 * HIGH_WATER + 17

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for i in range(size // 65536 + 1):
            writer.write(bytes([i % 251]) * min(65536, size - i * 65536))
            await writer.drain()

    async def go() -> None:
        async with Server(reply) as address:
            r = await pool().post(address, "/", b"{}", {})
            got = 0
            while chunk := await r.readany():
                got += len(chunk)
                await asyncio.sleep(0)  # a slow reader
            assert got == size

    asyncio.run(go())


def test_a_response_abandoned_half_read_is_not_reused() -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            await writer.drain()

    async def go() -> None:
        server = Server(reply)
        async with server as address:
            p = pool()
            for _ in range(2):
                r = await p.post(address, "/", b"{}", {})
                assert await r.readany() == b"abc"
                r.close()
            assert server.connections == 2
            p.close()

    asyncio.run(go())


def test_a_body_that_arrived_whole_is_taken_at_once_and_its_connection_reused() -> None:
    async def head_then_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            body = await read_request(reader)
            if body == b"slow":  # the head first, the body a moment later
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.1)
                writer.write(b"late")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            await writer.drain()

    async def go() -> None:
        server = Server(head_then_body)
        async with server as address:
            p = pool()
            r = await p.post(address, "/", b"fast", {})
            await asyncio.sleep(0.05)  # head and body are in one packet: both arrived
            assert r.arrived() == b"fast"
            r = await p.post(address, "/", b"slow", {})
            assert r.arrived() is None  # the head only: nothing taken, nothing released
            assert await r.read() == b"late"
            r = await p.post(address, "/", b"again", {})
            assert (r.arrived() or await r.read()) == b"again"
            assert server.connections == 1  # every response was read whole: one connection
            p.close()

    asyncio.run(go())
