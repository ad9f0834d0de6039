"""The gateway's HTTP/1.1 server: ``httptools``' parser on asyncio protocols, nothing else.

Why not a web framework: the gateway serves five routes, and per proxied request a framework
(aiohttp's was measured) spent about a fifth of the process's CPU on request objects, router
resolution, middleware chains, header multidicts and response preparation. Here a connection
is an ``asyncio.Protocol`` fed to ``httptools``' request parser (the C parser uvicorn uses);
a request becomes a ``Request`` with lower-case headers, and a handler returns a ``Response``
(written at once, with ``Content-Length``) or writes a ``StreamResponse`` (chunked) itself.
Those are ``messages``' values, which reach a connection only through ``messages.Connection``:
the same handler also runs on an ASGI server (``asgi``).

What a client can rely on, and what it cannot take (``ClientLimits``, per worker):

- keep-alive per HTTP/1.1 (``Connection: close`` and HTTP/1.0 honoured); pipelined requests
  are answered in order, one at a time; an idle connection closes after ``keepalive_s``;
- a client that goes away cancels its request's handler (``CancelledError`` in the handler:
  the proxy then closes its upstream, which stops the generation there);
- flow control as uvicorn's: while a request is served and ``max_pipelined`` more wait,
  reading stops (the rest stays in the socket; the parser is fed ``FEED_BYTES`` at a time, so
  one read cannot queue thousands); reading also stops while the write buffer is above its
  high-water mark, and a whole answer drains before the next request is served;
- deadlines, enforced by one sweep for all connections: the request line and headers within
  ``head_timeout_s`` of their first byte, a body at ``min_body_rate`` after a grace of
  ``body_timeout_s`` (408 and close; time spent with reading stopped by the server does not
  count), a write the client does not read within ``write_timeout_s`` (the connection is
  aborted, the handler cancelled);
- caps: ``max_connections`` per worker and ``max_per_client`` per client address (peers in the
  ``uncapped`` networks, the trusted proxies, are exempt); a connection past either is
  answered 503 with ``Retry-After`` and closed at once, as uvicorn's ``limit_concurrency``
  does. Not left in the backlog: asyncio cannot pause accepting (a closed listener does not
  reopen), and with ``SO_REUSEPORT`` the kernel has already given the connection to this
  worker, so a clear refusal lets the balancer in front retry elsewhere at once;
- limits: the request line and headers together at most ``max_head_bytes`` (16 KiB, 431), the body
  at most ``max_body_bytes`` (``Request.read`` raises ``BodyTooLarge``; the connection closes
  after the answer, the rest of the body unread); bytes that are not HTTP get a 400 and the
  connection closes (these answers are the caller's ``refusal``: the gateway's are in
  OpenAI's error shape, as its other refusals); ``Expect: 100-continue`` is answered
  before the body is read.

Not goals: TLS (terminated in front) and HTTP/2 or 3 (HTTP/1.1 only).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import ipaddress
import logging
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

import httptools

from trafficmgr.gateway.messages import (
    Answer,
    BodyTooLarge,
    Handler,
    Headers,
    Refusal,
    Request,
    Response,
    StreamResponse,
)

# the value types are imported from here too (the server's API before they had a module)
__all__ = [
    "Answer",
    "BodyTooLarge",
    "ClientLimits",
    "Handler",
    "Headers",
    "HttpProtocol",
    "HttpServer",
    "Refusal",
    "Request",
    "Response",
    "StreamResponse",
    "head",
    "whole",
]

log = logging.getLogger("trafficmgr.gateway")

# Node.js's and h11's default: an OpenAI client's head is a few hundred bytes, and a larger
# cap only lets junk headers (60 KB bearer tokens) leave the allocator holding ~100 MB
MAX_HEAD_BYTES = 16 * 1024
SWEEP_S = 1.0  # how often the deadlines are looked at (more often for shorter ones)
# bytes parsed at a time: reading pauses between two slices, so one pause lets in at most the
# requests a slice holds (~200 of the smallest) instead of a whole 256 KiB read's
FEED_BYTES = 4096

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ClientLimits:
    """What one client may hold of a worker, and for how long."""

    keepalive_s: float = 5.0  # an idle keep-alive connection closes after this
    head_timeout_s: float = 10.0  # request line and headers, from their first byte (408)
    body_timeout_s: float = 10.0  # a body's grace before its minimum rate applies (408)
    min_body_rate: int = 8 * 1024  # bytes a second a body must average after the grace
    write_timeout_s: float = 30.0  # a write the client does not read: the connection aborts
    max_pipelined: int = 2  # requests waiting behind the one served before reading stops
    max_connections: int = 4096  # per worker: more are answered 503 and closed
    max_per_client: int = 256  # per client address (trusted proxies exempt): likewise
    max_head_bytes: int = MAX_HEAD_BYTES  # request line and headers together (431)

    @property
    def sweep_s(self) -> float:
        """Return how often the deadlines are looked at: a quarter of the shortest, at most
        ``SWEEP_S``."""
        shortest = min(
            self.keepalive_s, self.head_timeout_s, self.body_timeout_s, self.write_timeout_s
        )
        return max(0.01, min(SWEEP_S, shortest / 4))


STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}


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
    name, and compiled (``scripts/build_compiled.py``) a class may not derive from an interpreted
    one such as ``asyncio.Protocol``."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = server.loop
        self.limits = server.limits
        self.max_body_bytes = server.max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] | None = None
        self.closed = False
        self.answering = False  # the served request's answer has begun (no refusal then)
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: Headers = {}
        self._head_bytes = 0
        self._current: Request | None = None  # the request being parsed
        self._queue: collections.deque[Request] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused = False  # the transport's write buffer is above its high-water mark
        self._read_paused = False
        self._unparsed = b""  # read before reading paused, parsed when it resumes
        self._client: str | None = None  # the address counted against the per-client cap
        # loop times the deadlines run from (0.0: none running)
        self._head_since = 0.0
        self._body_since = 0.0
        self._body_base = 0  # body bytes that had arrived at ``_body_since``
        self._drain_since = 0.0
        self._closing_since = 0.0  # closed with bytes the client has yet to read
        self.last_active = 0.0  # loop time the connection last finished a request

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # a TCP transport (uvloop's too)
        self.transport = tcp
        peer = transport.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) and peer else None
        server = self.server
        refused = server.admit(self)
        if refused:
            self.closed = True
            answer = server.refusal(503, refused)
            answer.headers["Retry-After"] = "1"
            tcp.write(whole(answer, False))
            tcp.close()
            return
        server.connections.add(self)
        self.last_active = server.loop.time()

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return  # refused already: what follows is not read
        if self._read_paused:  # read just before the pause took effect
            self._unparsed += data
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """Parse ``data`` a slice at a time, keeping what follows a pause for later: the
        parser cannot stop mid-buffer, so a slice bounds the requests one pause lets in."""
        if len(data) <= FEED_BYTES:
            self._parse(data)
            return
        view = memoryview(data)
        for start in range(0, len(data), FEED_BYTES):
            if self._read_paused:
                self._unparsed = bytes(view[start:])
                return
            if self.transport is None or self.transport.is_closing():
                return
            self._parse(view[start : start + FEED_BYTES])

    def _parse(self, data: bytes | memoryview) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not served here")
        except httptools.HttpParserError as exc:  # what a callback raised comes wrapped
            cap = self.limits.max_head_bytes
            if self._head_bytes > cap:
                self._refuse(431, f"request line and headers larger than {cap} bytes")
            else:
                self._refuse(400, f"malformed HTTP request: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.forget(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client went away: its handler stops
        self._wake_drain()

    def eof_received(self) -> bool | None:
        return None  # the client closed its end: the transport closes ours

    def pause_writing(self) -> None:
        self._paused = True
        self._pause_reading()  # no more requests while their answers cannot go out

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()
        self.resume_reading()

    # --- httptools callbacks ---

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._head_bytes = 0
        self._head_since = self.server.loop.time()

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
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":  # llhttp takes a line without one as 0.9
            raise ValueError(f"HTTP version {version} is not served")
        request = Request(self, parser.get_method().decode("latin-1"), self._url, self._headers)
        request.keep_alive = parser.should_keep_alive()
        request.http_10 = version == "1.0"
        self._body_since = self._head_since
        self._head_since = 0.0
        self._body_base = 0
        self._current = request
        self._queue.append(request)
        if self._task is None:
            self._next()
        elif len(self._queue) >= self.limits.max_pipelined:
            self._pause_reading()  # enough waiting: the rest stays in the socket

    def on_body(self, body: bytes) -> None:
        if self._current is not None:
            self._current.feed(body)

    def on_message_complete(self) -> None:
        self._body_since = 0.0
        if self._current is not None:
            self._current.finish()
            self._current = None

    # --- flow control and deadlines ---

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again if the queue and the write buffer allow (never from a parser callback:
        what was read before the pause is parsed here)."""
        if (
            not self._read_paused
            or self._paused
            or self.closed
            or len(self._queue) >= self.limits.max_pipelined
        ):
            return
        self._read_paused = False
        now = self.server.loop.time()  # the time paused was not the client's to account for
        if self._head_since:
            self._head_since = now
        if self._body_since and self._current is not None:
            self._body_since, self._body_base = now, self._current._size
        data, self._unparsed = self._unparsed, b""
        if data:
            self._feed(data)
        if not self._read_paused and self.transport is not None:
            self.transport.resume_reading()

    def overdue(self, now: float) -> None:
        """Enforce the deadlines: a write the client does not read, a head or a body arriving
        too slowly (408), an idle keep-alive connection (closed quietly)."""
        limits = self.limits
        waiting = self._drain_since or self._closing_since
        if waiting and now - waiting > limits.write_timeout_s:
            if self.transport is not None:
                self.transport.abort()  # connection_lost cancels the handler
            return
        if self._read_paused:
            return  # not reading: the client cannot be late
        if self._head_since and now - self._head_since > limits.head_timeout_s:
            self._refuse(408, f"request head not received within {limits.head_timeout_s:g} s")
            return
        current = self._current
        if current is not None and self._body_since:
            late = now - self._body_since - limits.body_timeout_s
            if late > 0 and current._size - self._body_base < late * limits.min_body_rate:
                message = f"request body slower than {limits.min_body_rate} bytes/s"
                self._refuse(408, message, instead_of_handler=True)
                return
        if not self.busy and not self._head_since and now - self.last_active > limits.keepalive_s:
            self._close()

    # --- serving ---

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > self.limits.max_head_bytes:
            raise ValueError("request head too large")

    def _next(self) -> None:
        if self._queue and not self.closed:
            self.answering = False
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
            self._task = None
            return
        except Exception:
            self._task = None
            log.exception("unhandled error serving %s %s", request.method, request.path)
            if not self.closed and not self.answering:
                answer = self.server.refusal(500, "internal error")
                self.transport.write(whole(answer, False))  # type: ignore[union-attr]
            self._close()
            return
        keep = request.keep_alive and request._complete and not self.server.closing
        if self.closed:
            keep = False
        elif isinstance(answer, Response):
            keep = keep and not request._too_large
            self.transport.write(whole(answer, keep))  # type: ignore[union-attr]
            if keep and self._paused:  # the next answer waits until this one went out
                try:
                    await self.drain()
                except (ConnectionResetError, asyncio.CancelledError):
                    keep = False
        elif not answer._done:  # a stream the handler did not end: cut, not ended; what is
            self._task = None  # queued for a client that stopped reading must not hold it
            if self.transport is not None:
                self.transport.abort()
            return
        self._task = None  # the next request's task starts only after this one
        if not keep:
            self._close()
            return
        self._next()
        self.resume_reading()

    def continue_if_expected(self, request: Request) -> None:
        if (request.headers.get("expect") or "").lower() == "100-continue" and not request._size:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def begin(self, request: Request, status: int, headers: Mapping[str, str]) -> bool:
        """Write a streamed answer's head: chunked, or close-delimited for HTTP/1.0; return
        whether its pieces are chunk-framed."""
        chunked = not request.http_10
        framing = ("Transfer-Encoding", "chunked") if chunked else ("Connection", "close")
        if not chunked:
            request.keep_alive = False
        self.answering = True
        self.write(head(status, headers.items(), framing))
        return chunked

    def end(self, chunked: bool) -> None:
        if chunked:
            self.write(b"0\r\n\r\n")

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait until the client has read enough; past ``write_timeout_s`` the connection is
        aborted (the handler is cancelled)."""
        if self.closed:
            raise ConnectionResetError("the client closed the connection")
        if not self._paused:
            return
        self._drained = self.server.loop.create_future()
        self._drain_since = self.server.loop.time()
        try:
            await self._drained
        finally:
            self._drain_since = 0.0
        if self.closed:
            raise ConnectionResetError("the client closed the connection")

    def _wake_drain(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _refuse(self, status: int, message: str, *, instead_of_handler: bool = False) -> None:
        """Answer ``status`` and close; a handler whose answer has not begun is cancelled
        first when ``instead_of_handler`` (its request is the one refused)."""
        if self.closed or self.transport is None:
            return
        task = self._task
        if task is not None and instead_of_handler and not self.answering:
            task.cancel()
            task = None
        if task is None:
            self.transport.write(whole(self.server.refusal(status, message), False))
        self._close()

    def _close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if transport.get_write_buffer_size():  # flushed first: the write deadline holds
                self._closing_since = self.server.loop.time()
            transport.close()

    @property
    def evictable(self) -> bool:
        """Whether the connection waits for a request with nothing of one begun: a worker at
        its connection cap closes these to take a new client (nginx reuses idle keep-alive
        connections the same way) rather than refuse it."""
        return not self.busy and not self._head_since and not self.closed

    @property
    def busy(self) -> bool:
        """Whether a request is being answered or waits its turn on this connection."""
        return self._task is not None or bool(self._queue) or self._current is not None


def _last_active(conn: HttpProtocol) -> float:
    return conn.last_active


class HttpServer:
    """Listen on ``host:port`` and serve ``handler``; ``stop`` drains."""

    def __init__(
        self,
        handler: Handler,
        refusal: Refusal,
        *,
        max_body_bytes: int,
        limits: ClientLimits | None = None,
        uncapped: Sequence[IpNetwork] = (),
    ):
        self.handler = handler
        self.refusal = refusal
        self.max_body_bytes = max_body_bytes
        self.limits = limits or ClientLimits()
        self.uncapped = tuple(uncapped)  # peers exempt from the per-client cap (proxies)
        self.connections: set[HttpProtocol] = set()
        self.per_client: dict[str, int] = {}
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

    def admit(self, conn: HttpProtocol) -> str:
        """Count a new connection against the caps; return why it is refused, or ""."""
        limits = self.limits
        if len(self.connections) >= limits.max_connections and not self._evict_idle():
            return f"this worker serves at most {limits.max_connections} connections"
        host = conn.peer[0] if conn.peer is not None else ""
        if not host or (self.uncapped and _within(host, self.uncapped)):
            return ""
        held = self.per_client.get(host, 0)
        if held >= limits.max_per_client:
            return f"at most {limits.max_per_client} connections per client address"
        self.per_client[host] = held + 1
        conn._client = host
        return ""

    def _evict_idle(self) -> bool:
        """Close the connections idle the longest, to make room; return whether there was one.

        A sixteenth of the cap goes at once: the walk over every connection is then paid once
        per many admissions, not per accept (a flood of connections would otherwise slow the
        accept loop until the backlog drops newcomers' SYNs). Closed connections leave
        ``connections`` only in ``connection_lost``, a loop turn later, so the evicted ones
        are taken out here at once."""
        idle = [c for c in self.connections if c.evictable]
        if not idle:
            return False
        batch = max(1, self.limits.max_connections // 16)
        for conn in heapq.nsmallest(batch, idle, key=_last_active):
            conn._close()
            self.forget(conn)
        return True

    def forget(self, conn: HttpProtocol) -> None:
        """Uncount a connection that closed."""
        self.connections.discard(conn)
        host = conn._client
        if host is not None:
            conn._client = None
            held = self.per_client.get(host, 1) - 1
            if held > 0:
                self.per_client[host] = held
            else:
                self.per_client.pop(host, None)

    def _sweep(self) -> None:
        """Enforce every connection's deadlines (one timer for all of them, not one per
        request); runs every ``SWEEP_S`` or more often when a deadline is shorter."""
        now = self.loop.time()
        for conn in list(self.connections):
            conn.overdue(now)
        self._sweeper = self.loop.call_later(self.limits.sweep_s, self._sweep)

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


def _within(host: str, networks: tuple[IpNetwork, ...]) -> bool:
    """Tell whether the address ``host`` is in one of ``networks``."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in net for net in networks)
