"""What a handler sees and answers: ``Request``, ``Response``, ``StreamResponse``.

They are the seam between the gateway's routes and the HTTP server under them. A request and
a streamed answer reach the connection that carries them only through ``Connection``, the few
things they need of it, so that two servers stand behind the same handler: the project's own
(``http.HttpProtocol``, the default: the least CPU per request and its own client limits) and
any ASGI server (``asgi.AsgiConnection``, run on uvicorn by ``--http-server uvicorn``). Both
build a ``Request`` the same way and write a ``Response`` or ``StreamResponse`` each in its
own framing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import httptools


class BodyTooLarge(Exception):
    """The request body is larger than the server accepts."""


# Request headers by lower-case name (ask with lower-case names); a repeated header: its
# values joined by ", ".
Headers = dict[str, str]


class Connection(Protocol):
    """What a request and its streamed answer need of the connection that carries them."""

    loop: asyncio.AbstractEventLoop  # the loop serving the connection
    max_body_bytes: int  # a larger body: ``Request.read`` raises ``BodyTooLarge``
    peer: tuple[str, int] | None  # the client's address and port, when known

    def continue_if_expected(self, request: Request) -> None:
        """Answer ``Expect: 100-continue`` before the body is read, where the server does
        not do so itself."""

    def begin(self, request: Request, status: int, headers: Mapping[str, str]) -> bool:
        """Start a streamed answer (its status and headers; ``drain`` sends them); return
        whether the body's pieces are to be chunk-framed before ``write``."""

    def write(self, data: bytes) -> None:
        """Queue a piece of the streamed answer; raise ``ConnectionResetError`` when the
        client has gone."""

    def end(self, chunked: bool) -> None:
        """Queue the end of the streamed answer."""

    async def drain(self) -> None:
        """Wait until what was queued has gone out to the client (or may be buffered);
        raise ``ConnectionResetError`` when the client has gone."""


class Request:
    """One request: method, path, headers, the peer, and its body as it arrives."""

    __slots__ = (
        "_chunks",
        "_complete",
        "_conn",
        "_limit",
        "_size",
        "_too_large",
        "_waiter",
        "headers",
        "http_10",
        "keep_alive",
        "method",
        "path",
        "peer",
    )

    def __init__(self, conn: Connection, method: str, url: bytes, headers: Headers) -> None:
        self.method = method
        self.path = _path(url)
        self.headers = headers
        self.peer = conn.peer
        self.keep_alive = True
        self.http_10 = False
        self._conn = conn
        self._limit = conn.max_body_bytes  # read once: ``feed`` runs per piece of body
        self._chunks: list[bytes] = []
        self._size = 0
        self._complete = False
        self._too_large = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and value.isdigit() else None

    def feed(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            self._too_large = True
            self._chunks.clear()
        else:
            self._chunks.append(data)
        self._wake()

    def finish(self) -> None:
        self._complete = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def arrived(self) -> bytes | None:
        """Return the whole body if it has all arrived (usual for a small one), else None
        (then ``read``, which waits for it, answers ``Expect`` and checks the limit)."""
        if self._complete and not self._too_large:
            return self._body()
        return None

    async def read(self) -> bytes:
        """Return the whole body; raise ``BodyTooLarge`` past the server's limit."""
        self._conn.continue_if_expected(self)
        while not self._complete and not self._too_large:
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._too_large:
            raise BodyTooLarge
        return self._body()

    def _body(self) -> bytes:
        chunks = self._chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _path(url: bytes) -> str:
    """Return the path of a request target (the query is not read)."""
    path = url.decode("latin-1")  # searched as text: ``in`` on bytes costs ten times more
    if path[:1] == "/" and "?" not in path and "#" not in path:
        return path  # origin form, the usual case: nothing to parse
    return httptools.parse_url(url).path.decode("latin-1")


class Response:
    """A whole response: written at once, with its length."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        *,
        status: int = 200,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        if content_type is not None:
            self.headers["Content-Type"] = content_type


class StreamResponse:
    """A response written as it is produced (framed by the server that carries it: chunked
    on the own server, close-delimited for HTTP/1.0)."""

    __slots__ = ("_chunked", "_conn", "_done", "headers", "status")

    def __init__(self, *, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.headers = dict(headers or {})
        self._conn: Connection | None = None
        self._chunked = True
        self._done = False

    @property
    def content_type(self) -> str | None:
        return self.headers.get("Content-Type")

    @content_type.setter
    def content_type(self, value: str) -> None:
        self.headers["Content-Type"] = value

    async def prepare(self, request: Request) -> None:
        """Send the status line and the headers."""
        conn = request._conn
        self._conn = conn
        self._chunked = conn.begin(request, self.status, self.headers)
        await conn.drain()

    async def write(self, data: bytes) -> None:
        if not data:
            return
        assert self._conn is not None, "prepare() first"
        if self._chunked:
            self._conn.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self._conn.write(data)
        await self._conn.drain()

    async def write_eof(self) -> None:
        if self._done or self._conn is None:
            return
        self._done = True
        self._conn.end(self._chunked)
        await self._conn.drain()


Answer = Response | StreamResponse
Handler = Callable[[Request], Awaitable[Answer]]
Refusal = Callable[[int, str], Response]  # (status, message) → the answer to bytes refused
