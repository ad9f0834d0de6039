"""The gateway's HTTP/1.1 server: ``httptools``' parser on asyncio protocols, nothing else.

Why not a web framework: the gateway serves five routes, and per proxied request a framework
(aiohttp's was measured) spent about a fifth of the process's CPU on request objects, router
resolution, middleware chains, header multidicts and response preparation. Here a connection
is an ``asyncio.Protocol`` fed to ``httptools``' request parser (the C parser uvicorn uses);
a request becomes a ``Request`` with lower-case headers, and a handler returns a ``Response``
(written at once, with ``Content-Length``) or writes a ``StreamResponse`` (chunked) itself.

What a client can rely on:

- keep-alive per HTTP/1.1 (``Connection: close`` and HTTP/1.0 honoured); pipelined requests
  are answered in order, one at a time; an idle connection closes after ``keepalive_s``;
- a client that goes away cancels its request's handler (``CancelledError`` in the handler:
  the proxy then closes its upstream, which stops the generation there);
- limits: the request line and headers together at most ``MAX_HEAD_BYTES`` (431), the body
  at most ``max_body_bytes`` (``Request.read`` raises ``BodyTooLarge``; the connection closes
  after the answer, the rest of the body unread); bytes that are not HTTP get a 400 and the
  connection closes (these answers are the caller's ``refusal``: the gateway's are in
  OpenAI's error shape, as its other refusals); ``Expect: 100-continue`` is answered
  before the body is read;
- writes wait while the client's socket buffer is full (a slow reader slows its stream).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, cast

import httptools

log = logging.getLogger("trafficmgr.gateway")

MAX_HEAD_BYTES = 64 * 1024
SWEEP_S = 1.0  # how often idle keep-alive connections are looked for

STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}


class BodyTooLarge(Exception):
    """The request body is larger than the server accepts."""


# Request headers by lower-case name (ask with lower-case names); a repeated header: its
# values joined by ", ".
Headers = dict[str, str]


class Request:
    """One request: method, path, headers, the peer, and its body as it arrives."""

    __slots__ = (
        "_chunks",
        "_complete",
        "_conn",
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

    def __init__(self, conn: HttpProtocol, method: str, url: bytes, headers: Headers) -> None:
        self.method = method
        self.path = _path(url)
        self.headers = headers
        self.peer = conn.peer
        self.keep_alive = True
        self.http_10 = False
        self._conn = conn
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
        if self._size > self._conn.max_body_bytes:
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
            self._waiter = self._conn.server.loop.create_future()
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
    """A response written as it is produced (chunked; close-delimited for HTTP/1.0)."""

    __slots__ = ("_chunked", "_conn", "_done", "headers", "status")

    def __init__(self, *, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.headers = dict(headers or {})
        self._conn: HttpProtocol | None = None
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
        self._chunked = not request.http_10
        framing = ("Transfer-Encoding", "chunked") if self._chunked else ("Connection", "close")
        if not self._chunked:
            request.keep_alive = False
        conn.write(head(self.status, self.headers.items(), framing))
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
        if self._chunked:
            self._conn.write(b"0\r\n\r\n")
        await self._conn.drain()


Answer = Response | StreamResponse
Handler = Callable[[Request], Awaitable[Answer]]
Refusal = Callable[[int, str], Response]  # (status, message) → the answer to bytes refused


def _lines(status: int, headers: Iterable[tuple[str, str]]) -> str:
    """Return the status line and the header lines, without the blank line that ends them."""
    status_line = STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n"
    return status_line + "".join([f"{k}: {v}\r\n" for k, v in headers])


def head(status: int, headers: Iterable[tuple[str, str]], *extra: tuple[str, str]) -> bytes:
    """Return the status line and the headers of a response."""
    more = "".join([f"{k}: {v}\r\n" for k, v in extra])
    return f"{_lines(status, headers)}{more}\r\n".encode("latin-1")


def whole(response: Response, keep_alive: bool) -> bytes:
    """Return a whole response's bytes."""
    text = _lines(response.status, response.headers.items())
    close = "" if keep_alive else "Connection: close\r\n"
    return (
        f"{text}Content-Length: {len(response.body)}\r\n{close}\r\n".encode("latin-1")
        + response.body
    )


class HttpProtocol:
    """One client connection: parse, run the handler per request in order, write answers.

    An asyncio protocol by its methods, not by its base class: asyncio and uvloop call them by
    name, and compiled (``bench/compiled_env.sh``) a class may not derive from an interpreted
    one such as ``asyncio.Protocol``."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.max_body_bytes = server.max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] | None = None
        self.closed = False
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: Headers = {}
        self._head_bytes = 0
        self._current: Request | None = None  # the request being parsed
        self._queue: collections.deque[Request] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused = False
        self.last_active = 0.0  # loop time the connection last finished a request

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (uvloop's too)
        peer = transport.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) and peer else None
        self.server.connections.add(self)
        self.last_active = self.server.loop.time()

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return  # refused already: what follows is not read
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not served here")
        except httptools.HttpParserError as exc:  # what a callback raised comes wrapped
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, f"request line and headers larger than {MAX_HEAD_BYTES} bytes")
            else:
                self._refuse(400, f"malformed HTTP request: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client went away: its handler stops
        self._wake_drain()

    def eof_received(self) -> bool | None:
        return None  # the client closed its end: the transport closes ours

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    # --- httptools callbacks ---

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        old = self._headers.get(key)
        self._headers[key] = text if old is None else f"{old}, {text}"

    def on_headers_complete(self) -> None:
        parser = self._parser
        request = Request(self, parser.get_method().decode("latin-1"), self._url, self._headers)
        request.keep_alive = parser.should_keep_alive()
        request.http_10 = parser.get_http_version() == "1.0"
        self._current = request
        self._queue.append(request)
        if self._task is None:
            self._next()

    def on_body(self, body: bytes) -> None:
        if self._current is not None:
            self._current.feed(body)

    def on_message_complete(self) -> None:
        if self._current is not None:
            self._current.finish()
            self._current = None

    # --- serving ---

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request head too large")

    def _next(self) -> None:
        if self._queue and not self.closed:
            self._task = self.server.loop.create_task(self._serve(self._queue.popleft()))
        else:
            self._task = None
            self.last_active = self.server.loop.time()
            if self.server.closing:
                self._close()

    async def _serve(self, request: Request) -> None:
        try:
            answer = await self.server.handler(request)
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("unhandled error serving %s %s", request.method, request.path)
            if not self.closed:
                answer = self.server.refusal(500, "internal error")
                self.transport.write(whole(answer, False))  # type: ignore[union-attr]
            self._close()
            return
        finally:
            self._task = None  # the next request's task starts only after this one
        if self.closed:
            return
        keep = request.keep_alive and request._complete and not self.server.closing
        if isinstance(answer, Response):
            keep = keep and not request._too_large
            self.transport.write(whole(answer, keep))  # type: ignore[union-attr]
        else:  # a stream the handler did not end (its client went away): cut, not ended
            keep = keep and answer._done
        if not keep:
            self._close()
            return
        self._next()

    def continue_if_expected(self, request: Request) -> None:
        if (request.headers.get("expect") or "").lower() == "100-continue" and not request._size:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionResetError("the client closed the connection")
        if not self._paused:
            return
        self._drained = self.server.loop.create_future()
        await self._drained
        if self.closed:
            raise ConnectionResetError("the client closed the connection")

    def _wake_drain(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _refuse(self, status: int, message: str) -> None:
        if self._task is None and not self.closed and self.transport is not None:
            self.transport.write(whole(self.server.refusal(status, message), False))
        self._close()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    @property
    def busy(self) -> bool:
        """Whether a request is being answered or waits its turn on this connection."""
        return self._task is not None or bool(self._queue) or self._current is not None


class HttpServer:
    """Listen on ``host:port`` and serve ``handler``; ``stop`` drains."""

    def __init__(
        self, handler: Handler, refusal: Refusal, *, max_body_bytes: int, keepalive_s: float = 75.0
    ):
        self.handler = handler
        self.refusal = refusal
        self.max_body_bytes = max_body_bytes
        self.keepalive_s = keepalive_s
        self.connections: set[HttpProtocol] = set()
        self.closing = False
        self.loop = asyncio.get_running_loop()  # built on the loop that serves
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen; return the bound port."""
        loop = self.loop
        self._sweep()
        self._server = await loop.create_server(
            lambda: cast(asyncio.Protocol, HttpProtocol(self)),
            host,
            port,
            backlog=4096,
            reuse_port=reuse_port or None,
        )
        # uvloop's ``sockets`` is a list where typeshed says tuple: read untyped, or the
        # compiled build's type check refuses it
        sockets: Sequence[socket.socket] = cast(Any, self._server).sockets or ()
        return int(sockets[0].getsockname()[1]) if sockets else port

    def _sweep(self) -> None:
        """Close connections idle longer than ``keepalive_s`` (one timer for all of them,
        not one per request); runs every ``SWEEP_S``."""
        cutoff = self.loop.time() - self.keepalive_s
        for conn in [c for c in self.connections if c.last_active < cutoff and not c.busy]:
            conn._close()
        self._sweeper = self.loop.call_later(min(SWEEP_S, self.keepalive_s), self._sweep)

    async def stop(self, grace_s: float) -> None:
        """Stop listening, close idle connections, give requests in flight ``grace_s``."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if not conn.busy:
                conn._close()
        deadline = asyncio.get_running_loop().time() + grace_s
        while any(c.busy for c in self.connections):
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
