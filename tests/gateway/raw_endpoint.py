"""A raw loopback endpoint for answers no HTTP library would send: endless heads, headers
and bodies, or exact bytes of an event stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from tests.gateway.world import LoopThread


class RawEndpoint:
    """A loopback endpoint that answers every request with ``prefix``, then ``unit`` for ever
    (nothing more when ``unit`` is empty), counting the bytes it got out."""

    def __init__(self, prefix: bytes, unit: bytes = b"") -> None:
        self.prefix = prefix
        self.unit = unit
        self.sent = 0
        self.requests = 0
        self.port = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            self.requests += 1
            writer.write(self.prefix)
            self.sent += len(self.prefix)
            while self.unit:
                writer.write(self.unit)
                await writer.drain()
                self.sent += len(self.unit)
            await reader.read()  # until the gateway closes
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def raw_endpoints() -> Iterator[Callable[[bytes, bytes], RawEndpoint]]:
    """Yield a function starting ``RawEndpoint``s on a loop of their own; stop them after."""
    thread, started = LoopThread(), []

    def start(prefix: bytes, unit: bytes = b"") -> RawEndpoint:
        endpoint = RawEndpoint(prefix, unit)
        thread.call(endpoint.start())
        started.append(endpoint)
        return endpoint

    yield start
    for endpoint in started:
        thread.call(endpoint.stop())
    thread.close()
