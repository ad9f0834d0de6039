"""The gateway's handler as an ASGI 3 application, served by uvicorn (``--http-server uvicorn``).

The own HTTP layer (``http``) is the default: it costs the least CPU per request and enforces
every client limit of ``ClientLimits``. This adapter keeps that choice reversible: the same
handler, the same ``Request``, ``Response`` and ``StreamResponse`` (``messages``), behind a
maintained server. Per request: a ``Request`` from the scope (the client address from
``scope["client"]``, the path from ``raw_path``), its body fed from ``receive`` as it arrives
and no further than ``max_body_bytes`` (then ``read`` raises ``BodyTooLarge``, the same 413),
``http.disconnect`` before the answer ended cancels the handler (as the own server does when a
client goes away), a ``Response`` sent with its length, a ``StreamResponse`` as body messages
with ``more_body``. ``UvicornServer`` runs uvicorn on the caller's loop with the limits of
``ClientLimits`` that uvicorn has (``docs/gateway.md``, "HTTP server: own or uvicorn").
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import uvicorn

from trafficmgr.gateway.http import ClientLimits
from trafficmgr.gateway.messages import Handler, Headers, Refusal, Request, Response

log = logging.getLogger("trafficmgr.gateway")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class AsgiConnection:
    """One ASGI request's side of ``messages.Connection``: streamed pieces queue as ASGI
    messages, ``drain`` sends them (uvicorn's ``send`` waits while the client is behind)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        max_body_bytes: int,
        peer: tuple[str, int] | None,
        send: Send,
    ) -> None:
        self.loop = loop
        self.max_body_bytes = max_body_bytes
        self.peer = peer
        self.closed = False  # the client went away
        self.started = False  # the answer's head is queued or sent
        self.ended = False  # the answer's last message is queued or sent
        self._send = send
        self._pending: list[Message] = []

    def continue_if_expected(self, request: Request) -> None:
        return None  # uvicorn answers ``Expect: 100-continue`` on the first ``receive``

    def begin(self, request: Request, status: int, headers: Mapping[str, str]) -> bool:
        self.started = True
        self._pending.append(
            {"type": "http.response.start", "status": status, "headers": _encoded(headers)}
        )
        return False  # the server frames the body

    def write(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("the client closed the connection")
        self._pending.append({"type": "http.response.body", "body": data, "more_body": True})

    def end(self, chunked: bool) -> None:
        self.ended = True
        self._pending.append({"type": "http.response.body", "body": b"", "more_body": False})

    async def drain(self) -> None:
        pending, self._pending = self._pending, []
        for message in pending:
            if self.closed:  # uvicorn drops what is sent after a disconnect: say so
                raise ConnectionResetError("the client closed the connection")
            await self._send(message)


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def _headers(scope: Scope) -> Headers:
    """Return the scope's headers by lower-case name, repeated ones joined by ", "."""
    out: Headers = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        old = out.get(key)
        out[key] = text if old is None else f"{old}, {text}"
    return out


class AsgiGateway:
    """The gateway's ``handler`` as an ASGI 3 application (HTTP only; no lifespan)."""

    def __init__(self, handler: Handler, refusal: Refusal, *, max_body_bytes: int) -> None:
        self.handler = handler
        self.refusal = refusal
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off and WebSockets are not served
        client = scope.get("client")
        peer = (str(client[0]), int(client[1])) if client else None
        loop = asyncio.get_running_loop()
        conn = AsgiConnection(loop, self.max_body_bytes, peer, send)
        url = scope.get("raw_path") or scope["path"].encode("utf-8")
        request = Request(conn, scope["method"], url, _headers(scope))
        request.http_10 = scope.get("http_version") == "1.0"
        handling = asyncio.ensure_future(self.handler(request))
        reading = loop.create_task(_read_body(request, conn, receive, handling))
        try:
            answer = await handling
        except asyncio.CancelledError:
            if conn.closed:
                return  # the client went away: nobody to answer
            raise
        except Exception:
            log.exception("unhandled error serving %s %s", request.method, request.path)
            if not conn.started and not conn.closed:
                await _send_whole(send, self.refusal(500, "internal error"))
            return  # an answer begun and broken off: uvicorn closes the connection
        finally:
            if not reading.done():
                reading.cancel()
        if isinstance(answer, Response) and not conn.closed:
            await _send_whole(send, answer)
        # a stream the handler did not end (its client failed): returning unended, uvicorn
        # closes the connection


async def _read_body(
    request: Request, conn: AsgiConnection, receive: Receive, handling: asyncio.Future[Any]
) -> None:
    """Feed the body to ``request`` as it arrives, no further than the limit; then wait for
    the client to go away, and cancel the handler if its answer had not ended."""
    complete = False
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request" and not complete:
            data = message.get("body", b"")
            if data:
                size += len(data)
                request.feed(data)
            if size > conn.max_body_bytes:
                return  # the rest stays unread: uvicorn stops reading past its buffer
            if not message.get("more_body", False):
                complete = True
                request.finish()
        elif kind == "http.disconnect":
            if not conn.ended:
                conn.closed = True
                handling.cancel()
            return


async def _send_whole(send: Send, response: Response) -> None:
    body = response.body
    headers = _encoded(response.headers)
    headers.append((b"content-length", str(len(body)).encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def uvicorn_config(
    app: AsgiGateway, limits: ClientLimits, *, shutdown_timeout_s: float
) -> uvicorn.Config:
    """Return uvicorn's configuration with the limits of ``ClientLimits`` it has an
    equivalent for (keep-alive, a connection cap; the head size under h11 only)."""
    return uvicorn.Config(
        app,
        loop="none",  # the caller's loop (uvloop in a gateway worker)
        http="httptools",
        ws="none",
        lifespan="off",
        interface="asgi3",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=max(1, math.ceil(limits.keepalive_s)),
        limit_concurrency=limits.max_connections,
        h11_max_incomplete_event_size=limits.max_head_bytes,
        timeout_graceful_shutdown=max(1, math.ceil(shutdown_timeout_s)),
        backlog=4096,
    )


class UvicornServer:
    """Serve an ``AsgiGateway`` with uvicorn on the running loop; as ``http.HttpServer``,
    ``start`` listens and ``stop`` drains."""

    def __init__(
        self,
        handler: Handler,
        refusal: Refusal,
        *,
        max_body_bytes: int,
        limits: ClientLimits | None = None,
        shutdown_timeout_s: float = 30.0,
    ) -> None:
        self.app = AsgiGateway(handler, refusal, max_body_bytes=max_body_bytes)
        config = uvicorn_config(
            self.app, limits or ClientLimits(), shutdown_timeout_s=shutdown_timeout_s
        )
        self.server = uvicorn.Server(config)
        self._sockets: list[socket.socket] = []
        self._ticks: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen; return the bound port."""
        sock = _listening(host, port, reuse_port)
        self._sockets = [sock]
        server = self.server
        server.config.load()
        server.lifespan = server.config.lifespan_class(server.config)
        await server.startup(sockets=self._sockets)
        # uvicorn's tick (the Date header, its exit flag); its signal handling stays off:
        # the gateway's worker owns SIGINT and SIGTERM
        self._ticks = asyncio.get_running_loop().create_task(server.main_loop())
        return int(sock.getsockname()[1])

    async def stop(self, grace_s: float) -> None:
        """Stop listening, close idle connections, give requests in flight ``grace_s``."""
        server = self.server
        server.config.timeout_graceful_shutdown = max(1, math.ceil(grace_s))
        server.should_exit = True
        if self._ticks is not None:
            await self._ticks
        await server.shutdown(sockets=self._sockets)


def _listening(host: str, port: int, reuse_port: bool) -> socket.socket:
    """Return a socket bound to ``host:port`` (0: a free port), ``SO_REUSEPORT`` if asked."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
