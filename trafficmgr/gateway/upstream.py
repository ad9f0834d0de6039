"""The gateway's client to the endpoints: HTTP/1.1 keep-alive over asyncio protocols.

Why not a general client library: per proxied request the gateway needs exactly one thing —
write a POST on a pooled connection, read the status, the headers and the body as it
arrives — and a general client (aiohttp's was measured) spent about a quarter of the
gateway's CPU on URL objects, header multidicts, payload registries, timers and tasks around
that. Here a connection is an ``asyncio.Protocol`` with ``httptools``' response parser (the
C parser uvicorn uses); the request is one ``write``; body chunks go to the reader as they
arrive, with the transport paused above ``HIGH_WATER`` unread bytes (a slow client slows its
upstream instead of growing the gateway).

Connections are kept per address (LIFO: the warmest first) for ``keepalive_s`` and reused
only after a whole response was read from them; one that the server closed while idle
leaves the pool when its ``connection_lost`` runs. A response not read to its end is
aborted on ``close()`` (for a stream: the server sees the connection drop and stops the
generation). Errors: ``ConnectFailed`` (nothing was sent), ``UpstreamBroken`` (the
connection failed or the bytes were not HTTP). Timeouts are the caller's (``Deadline``).

An endpoint cannot make the gateway buffer without bound, nor desynchronise a pooled
connection: a response's head (1xx interims included) is at most ``max_head_bytes`` and
``max_headers`` headers, a body read whole at most ``max_body_bytes`` and all bodies being
read whole through one pool together at most ``max_buffered_bytes``; interim responses
(``100 Continue``, ``103 Early Hints``) are skipped; any byte after the end of the response
(a second response glued to the first; blank lines in the same read aside, which llhttp skips
between messages) is a protocol error. Each of these fails the response
with ``UpstreamBroken`` and aborts its connection, which never goes back to the pool.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Mapping
from typing import NoReturn, cast

import httptools

HIGH_WATER = 256 * 1024  # unread body bytes above which the connection stops reading
LOW_WATER = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 16 * 1024 * 1024  # one response read whole
# All responses being read whole at once, per pool (a worker has one): with one endpoint
# sending endless bodies to many requests, the worker holds at most this much for them.
MAX_BUFFERED_BYTES = 48 * 1024 * 1024


class UpstreamError(Exception):
    """The endpoint could not be reached or did not answer in HTTP."""


class ConnectFailed(UpstreamError):
    """No connection: the request was not sent."""


class UpstreamBroken(UpstreamError):
    """The connection failed, or what came back was not an HTTP response."""


class Connection:
    """One keep-alive connection and the response being read from it (an asyncio protocol by
    its methods, as ``http.HttpProtocol`` is)."""

    def __init__(self, pool: UpstreamPool, address: str, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.address = address
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.pooled = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._response: UpstreamResponse | None = None
        self._head_read = 0  # bytes read while the final head was incomplete
        self._head_bytes = 0  # header names and values parsed, interims' included
        self._header_count = 0
        self._interim = False  # the message being parsed is a 1xx
        self._final = False  # the final response was parsed whole: nothing may follow
        self._refusal: UpstreamBroken | None = None  # why a callback stopped the parser

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (uvloop's too)

    def data_received(self, data: bytes) -> None:
        response = self._response
        if response is None:  # bytes nobody asked for: the connection is unusable
            self.abort()
            return
        if self._final:
            self._fail(UpstreamBroken("bytes after the end of the response"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamBroken("the endpoint switched protocols"))
            return
        except httptools.HttpParserError as exc:
            self._fail(self._refusal or UpstreamBroken(f"not an HTTP response: {exc}"))
            return
        if not response._headers_seen:
            # what the parser holds of an unfinished head (a header value is kept whole until
            # its line ends) grows with every read: bounded by the head limit plus one read
            self._head_read += len(data)
            if self._head_read > self.pool.max_head_bytes:
                limit = self.pool.max_head_bytes
                self._fail(UpstreamBroken(f"response head larger than {limit} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        response = self._response
        if response is not None and not response.complete:
            if response.delimited_by_close():
                response.finish()  # a body without a length ends with its connection
            if not response.complete:
                why = type(exc).__name__ if exc else "closed by the endpoint"
                response.fail(UpstreamBroken(f"connection lost ({why})"))

    def eof_received(self) -> bool | None:
        return None  # the endpoint closed its end: the transport closes ours

    def pause_writing(self) -> None:
        pass  # a request is one write; the transport buffers it

    def resume_writing(self) -> None:
        pass

    # --- httptools callbacks (an exception raised here stops the parser: ``_refuse``) ---

    def on_message_begin(self) -> None:
        if self._final:  # a second response in the read that ended the first
            self._refuse("bytes after the end of the response")

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self._response is not None
        self._head_bytes += len(name) + len(value)
        self._header_count += 1
        if self._header_count > self.pool.max_headers:
            self._refuse(f"more than {self.pool.max_headers} response headers")
        if self._head_bytes > self.pool.max_head_bytes:
            self._refuse(f"response head larger than {self.pool.max_head_bytes} bytes")
        self._response.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        assert self._response is not None
        status = self._parser.get_status_code()
        if status == 101:
            self._refuse("the endpoint switched protocols")
        if 100 <= status < 200:  # an interim response: the final one follows
            self._interim = True
            return
        self._response.headers_done(status)

    def on_body(self, body: bytes) -> None:
        assert self._response is not None
        self._response.body(body)

    def on_message_complete(self) -> None:
        response = self._response
        assert response is not None
        if self._interim:
            self._interim = False
            response.raw_headers.clear()
            return
        self._final = True
        response.keep_alive = self._parser.should_keep_alive()
        response.finish()

    def _refuse(self, why: str) -> NoReturn:
        """Stop the parser: the response is broken for ``why``."""
        refusal = self._refusal = UpstreamBroken(why)
        raise refusal

    # --- use ---

    def send(self, response: UpstreamResponse, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self._response = response
        self._head_read = self._head_bytes = self._header_count = 0
        self._interim = self._final = False
        self.transport.write(head + body if len(body) < 16_384 else head)
        if len(body) >= 16_384:
            self.transport.write(body)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def release(self) -> None:
        """The response was read whole: back to the pool, or closed if it may not stay."""
        response, self._response = self._response, None
        if self.closed or response is None or not response.keep_alive:
            self.abort()
            return
        self.pool.put(self)  # the parser reads the next response as it read this one

    def abort(self) -> None:
        self.closed = True
        self._response = None
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: UpstreamError) -> None:
        if self._response is not None:
            self._response.fail(exc)
        self.abort()


class UpstreamResponse:
    """The status, headers and body of one upstream response, read as it arrives."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_error",
        "_headers",
        "_headers_seen",
        "_released",
        "_waiter",
        "complete",
        "keep_alive",
        "raw_headers",
        "status",
    )

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: UpstreamError | None = None
        self._headers_seen = False
        self._released = False
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self._headers: dict[str, str] | None = None
        self.status = 0
        self.complete = False
        self.keep_alive = False

    # --- fed by the connection ---

    def headers_done(self, status: int | None) -> None:
        self.status = status or 0
        self._headers_seen = True
        self._wake()

    def body(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER:
            self._conn.pause()
        self._wake()

    @property
    def headers(self) -> dict[str, str]:
        """The headers by lower-case name (a repeated header: the last); decoded when first
        asked, which a proxied 200 never is."""
        if self._headers is None:
            self._headers = {
                name.decode("latin-1").lower(): value.decode("latin-1")
                for name, value in self.raw_headers
            }
        return self._headers

    def delimited_by_close(self) -> bool:
        """Whether the body ends when the connection does (no length, not chunked)."""
        h = self.headers
        return (
            self._headers_seen
            and "content-length" not in h
            and "chunked" not in h.get("transfer-encoding", "").lower()
        )

    def finish(self) -> None:
        self.complete = True
        self._wake()

    def fail(self, exc: UpstreamError) -> None:
        if self._error is None:
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wait(self) -> asyncio.Future[None]:
        """Return a future the next arrival (or failure) resolves; awaited directly, it is a
        coroutine frame fewer per wait than an ``async def`` (a stream waits once a chunk).
        A waiter left behind (its reader cancelled) is done, and ``_wake`` skips it."""
        waiter = self._waiter = self._conn.loop.create_future()
        return waiter

    # --- read by the proxy ---

    async def start(self) -> None:
        """Wait for the status line and the headers."""
        while not self._headers_seen:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def readany(self) -> bytes:
        """Return the body bytes that arrived (waiting for some); b"" at its end."""
        while True:
            if self._chunks:
                return self._take()
            if self._error is not None:  # before ``complete``: bytes after the end fail it
                raise self._error
            if self.complete:
                self.close()
                return b""
            await self._wait()

    def arrived(self) -> bytes | None:
        """Return the whole body if it has all arrived (the connection goes back to the
        pool), else None: then ``read`` waits for it."""
        if not self.complete or self._error is not None:
            return None
        data = self._take()
        self.close()
        return data

    def _take(self) -> bytes:
        """Return and forget the bytes buffered (reading resumes if it was paused)."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if self._buffered > LOW_WATER:
            self._conn.resume()
        self._buffered = 0
        return data

    async def read(self, limit: int | None = None) -> bytes:
        """Return the whole body (or its first ``limit`` bytes, the rest discarded); raise
        UpstreamBroken, the connection aborted, when it is larger than the pool allows."""
        pool = self._conn.pool
        cap = pool.max_body_bytes
        parts = []
        size = 0
        try:
            while limit is None or size < limit:
                chunk = await self.readany()
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
                pool.buffered += len(chunk)
                if limit is None and size > cap:
                    self.close()
                    raise UpstreamBroken(f"response body larger than {cap} bytes")
                if pool.buffered > pool.max_buffered_bytes:
                    self.close()
                    raise UpstreamBroken(
                        f"responses read whole hold more than {pool.max_buffered_bytes} bytes"
                    )
            data = b"".join(parts)
        finally:
            pool.buffered -= size
        return data if limit is None else data[:limit]

    def close(self) -> None:
        """Give the connection back when the response was read whole, else abort it."""
        if self._released:
            return
        self._released = True
        if self.complete and not self._chunks and self._error is None:
            self._conn.release()
        else:
            self._conn.abort()


class UpstreamPool:
    """Keep-alive connections by address, and the one call the proxy makes."""

    def __init__(
        self,
        connect_timeout_s: float,
        keepalive_s: float,
        max_idle: int,
        headers: Mapping[str, str] | None = None,
        *,
        max_head_bytes: int = MAX_HEAD_BYTES,
        max_headers: int = MAX_HEADERS,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle
        self.max_head_bytes = max_head_bytes
        self.max_headers = max_headers
        self.max_body_bytes = max_body_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self.buffered = 0  # bytes of the responses being read whole now
        self._idle: dict[str, list[Connection]] = {}
        self._idle_count = 0
        self._heads: dict[tuple[str, str], bytes] = {}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())

    async def post(
        self, address: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamResponse:
        """Send ``body`` to ``http://address/path``; return once the headers arrived."""
        conn = self._take(address) or await self._connect(address)
        response = UpstreamResponse(conn)
        extra = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
        head = f"Content-Length: {len(body)}\r\n{extra}\r\n".encode("latin-1")
        conn.send(response, self._head(address, path) + head, body)
        try:
            await response.start()
        except BaseException:
            conn.abort()
            raise
        return response

    def _head(self, address: str, path: str) -> bytes:
        key = (address, path)
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = (
                f"POST {path} HTTP/1.1\r\nHost: {address}\r\n{self._fixed}".encode("latin-1")
            )
        return head

    async def _connect(self, address: str) -> Connection:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        loop = asyncio.get_running_loop()
        # wait_for, not ``async with asyncio.timeout``: compiled (``scripts/build_compiled.py``),
        # an exception raised inside that block escaped the handlers below
        try:
            connecting = loop.create_connection(
                lambda: cast(asyncio.Protocol, Connection(self, address, loop)), host, int(port)
            )
            _, protocol = await asyncio.wait_for(connecting, self.connect_timeout_s)
        except TimeoutError:
            raise ConnectFailed(
                f"cannot connect to {address}: no answer in {self.connect_timeout_s:g} s"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConnectFailed(f"cannot connect to {address}: {exc}") from None
        return cast(Connection, protocol)

    def _take(self, address: str) -> Connection | None:
        idle = self._idle.get(address)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            conn.pooled = False
            self._idle_count -= 1
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.abort()
        return None

    def put(self, conn: Connection) -> None:
        if self._idle_count >= self.max_idle:
            conn.abort()
            return
        conn.idle_since = time.monotonic()
        conn.pooled = True
        self._idle.setdefault(conn.address, []).append(conn)
        self._idle_count += 1

    @property
    def idle_connections(self) -> int:
        """Return how many connections wait in the pool."""
        return self._idle_count

    def forget(self, conn: Connection) -> None:
        """Drop a pooled connection that closed while idle."""
        if conn.pooled:
            conn.pooled = False
            self._idle[conn.address].remove(conn)
            self._idle_count -= 1

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.pooled = False
                conn.abort()
        self._idle.clear()
        self._idle_count = 0
