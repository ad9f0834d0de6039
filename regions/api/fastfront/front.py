"""The hot paths' ASGI front: heartbeats and decisions answered without the Django stack.

``POST /api/v1/heartbeats/`` and ``POST /api/v1/route`` are nearly all of the traffic, and
gateways report completions (``POST /api/v1/route/completions``) in step with decisions. Through
Django each pays a thread of its own for the sync middleware (asgiref gives every request a
fresh thread, hence a fresh database connection), DRF's request wrapping and negotiation, and
a token query. This front answers them on the event loop with the same services (``ingest``,
``decisions``, ``completions``), the same checks and the same replies (a completions report
over ``INLINE_REPORT_BYTES`` is parsed and stored in a thread of its own, so that a large one
does not hold up the decisions behind it), and hands everything else to Django:

- it takes only ``POST`` to exactly those paths with ``Authorization: Bearer <secret>``, no
  query string, no ``Accept`` or a JSON one, an allowed ``Host``, a declared body size within
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` and, under ``SECURE_SSL_REDIRECT``, HTTPS. Anything else
  (sessions, browsers, ``?format=``, redirects, oversized bodies) goes to Django as it came,
  the body read so far replayed;
- the principal comes from the token cache (``regions.access.auth``), a miss resolved in the
  database thread. A secret that resolves to nobody, or a token of the wrong kind (an API
  token posting heartbeats, an agent asking for a route), goes to Django, whose 401/403 and
  counters are the ones of record;
- the database is used only in one worker thread per process (token misses, fleet view
  reloads, agent bindings the token's region does not settle) and by the history writer
  (``heartbeat_history.HistoryWriter``), never on the event loop; heartbeats that reach the
  hot state in the same turn of the loop share one Redis round trip (``PutBatch``);
- the per-process rate limit is ``LoopRateThrottle``'s, errors are rendered by the API's
  exception handler, and replies carry DRF's and the security middleware's headers (``Vary``,
  ``Allow``, ``X-Frame-Options``, ``nosniff``, ``Referrer-Policy``, COOP, HSTS over HTTPS).
  A store that cannot be reached (Redis, the database; ``outage.is_outage``), even while
  the token is being checked, is a 503 ``unavailable`` with ``Retry-After``; an unexpected
  error is logged to ``django.request`` and answered 500 in the error format. Both hold for
  what Django fails to answer at all (an error escaping it before its reply starts).

The rules it applies as Django would (hosts, HTTPS, the body limit, the security headers)
are in ``fastfront.http``. The DRF views (``regions.api.loop.views``) keep the OpenAPI description.
``TRAFFICMGR_LOOP_FRONT=0`` in the environment turns the front off.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from django.db import close_old_connections, connections
from django.urls import reverse
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer

from regions import conf, hotstate
from regions.access import auth
from regions.api.decide import route_reply
from regions.api.errors import (
    error_body,
    exception_handler,
    is_outage,
    note_outage,
    outage_body,
    outage_headers,
)
from regions.api.fastfront.http import (
    Message,
    Receive,
    Scope,
    Send,
    http_settings,
    read_body,
    replay,
)
from regions.api.throttling import LoopRateThrottle, ident
from regions.decisions import completions
from regions.errors import DomainError
from regions.fleet import snapshot
from regions.loop import heartbeat_history, ingest

App = Callable[[Scope, Receive, Send], Awaitable[None]]
T = TypeVar("T")

log = logging.getLogger("django.request")
JSON_ACCEPTS = {b"", b"*/*", b"application/json"}
# Reload the fleet view in the background this long before it would go stale.
REFRESH_AHEAD_S = 2.0
WANTED = {b"authorization", b"host", b"content-length", b"accept"}
INLINE_REPORT_BYTES = 16 * 1024
HEARTBEAT, ROUTE, COMPLETIONS = "heartbeat", "route", "completions"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class LoopFront:
    """ASGI middleware answering heartbeats and decisions itself (see the module docstring)."""

    def __init__(self, app: App, enabled: bool | None = None) -> None:
        self.app = app
        self.enabled = conf.loop_front_enabled() if enabled is None else enabled
        self.history = heartbeat_history.HistoryWriter()
        self.puts = PutBatch()
        self._paths: dict[str, str] | None = None  # path → HEARTBEAT, ROUTE or COMPLETIONS
        self._db: ThreadPoolExecutor | None = None
        self._reports: ThreadPoolExecutor | None = None
        self._view: snapshot.FleetView | None = None
        self._refresh: Future[snapshot.FleetView] | None = None
        self._renderer = JSONRenderer()
        atexit.register(self.history.stop)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = self._route_of(scope)
        admitted = None if kind is None else self._admissible(scope)
        if kind is None or admitted is None:
            return await self._pass_on(scope, receive, send)
        secret, secure = admitted
        messages, body = await read_body(receive)
        if body is None:  # too large, or the client left: Django answers (or notices)
            return await self._pass_on(scope, replay(messages, receive), send)
        try:
            user = auth.cached_token(secret) or await self._in_db(auth.resolve_token, secret)
        except Exception as exc:  # an outage: the token can be neither let in nor refused
            return await self._send(send, _failed(exc, scope), secure)
        if user is None or user.is_agent != (kind == HEARTBEAT):
            return await self._pass_on(scope, replay(messages, receive), send)
        auth.act_as(user, str((scope.get("client") or ("",))[0])[:100])
        try:
            reply = await self._answer(user, kind, body)
        except (DomainError, exceptions.APIException) as exc:
            response = exception_handler(exc, {})
            assert response is not None
            headers = {k: v for k, v in response.items() if k == "Retry-After"}
            reply = Reply(response.status_code, response.data, headers)
        except Exception as exc:
            reply = _failed(exc, scope)
        await self._send(send, reply, secure)

    async def _pass_on(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand the request to Django; an error escaping it before any reply is answered here
        in the error format (a JSON 503 for a store outage), not as the server's plain 500."""
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started or scope["type"] != "http":
                raise
            reply = _failed(exc, scope)
            await self._send(send, reply, scope.get("scheme") == "https", allow=None)

    def close(self) -> None:
        """Store pending history, close the database thread's connections and end it."""
        self.history.stop()
        if self._db is not None:
            self._db.submit(connections.close_all).result()
            self._db.shutdown()
            self._db = None
        if self._reports is not None:
            self._reports.shutdown()
            self._reports = None

    async def _answer(self, user: auth.TokenUser, kind: str, body: bytes) -> Reply:
        allowed, wait = LoopRateThrottle.take(ident(user.token))
        if not allowed:
            raise exceptions.Throttled(wait)
        view = await self._fleet()
        if kind == ROUTE:
            return Reply(*route_reply(body, view))
        if kind == COMPLETIONS:
            return Reply(202, {"accepted": await self._report(body, view)}, {})
        token = user.token
        doc = ingest.parse_heartbeat(body)
        ref = ingest.endpoint_ref(view, doc["endpoint"])
        if ingest.known_binding(view, token, ref) is None:  # type: ignore[arg-type]
            await self._in_db(ingest.authorise, view, token, ref)
        else:
            ingest.authorise(view, token, ref)  # type: ignore[arg-type]
        put = ingest.prepare(ref, doc, time.time())
        result = ingest.conclude(view, ref, put, await self.puts.put(put))
        if result.sample is not None:
            self.history.submit(result.sample)
        return Reply(200, result.body, {})

    async def _report(self, body: bytes, view: snapshot.FleetView) -> int:
        """Take a completions report: a small one here, a large one in a thread."""
        if len(body) <= INLINE_REPORT_BYTES:
            return completions.report(body, view)
        if self._reports is None:
            self._reports = ThreadPoolExecutor(2, thread_name_prefix="trafficmgr-reports")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reports, completions.report, body, view)

    # --- what this front takes --------------------------------------------------------------

    def _route_of(self, scope: Scope) -> str | None:
        """HEARTBEAT, ROUTE or COMPLETIONS; None for anything to pass on."""
        if (
            not self.enabled
            or scope["type"] != "http"
            or scope["method"] != "POST"
            or scope.get("query_string")
            or scope.get("root_path")
        ):
            return None
        if self._paths is None:
            self._paths = {
                reverse("heartbeats"): HEARTBEAT,
                reverse("route"): ROUTE,
                reverse("route-completions"): COMPLETIONS,
            }
        return self._paths.get(scope["path"])

    def _admissible(self, scope: Scope) -> tuple[str, bool] | None:
        """The bearer secret of a request this front may answer and whether it is secure."""
        http = http_settings()
        proxy = http.proxy_header
        found: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in WANTED or name == proxy:
                if name in found:
                    return None  # Django joins repeated headers; let it judge them
                found[name] = value
        declared = found.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > http.max_body:
            return None
        if found.get(b"accept", b"").strip() not in JSON_ACCEPTS:
            return None
        if not http.host_allowed(found.get(b"host")):
            return None
        secure = http.secure(scope, found.get(proxy) if proxy else None)
        if http.ssl_redirect and not secure:
            return None
        parts = found.get(b"authorization", b"").split()
        if len(parts) != 2 or parts[0].lower() != b"bearer" or not parts[1].isascii():
            return None
        return parts[1].decode("ascii"), secure

    # --- the database, off the event loop -----------------------------------------------------

    async def _in_db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` in this process's database thread."""
        if self._db is None:
            self._db = ThreadPoolExecutor(1, thread_name_prefix="trafficmgr-db")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, partial(_with_connection, fn, *args))

    async def _fleet(self) -> snapshot.FleetView:
        """The fleet view, fresh by ``snapshot.current``'s rules, read off the event loop."""
        view = self._view
        if view is not None and view.config_version == hotstate.get().config_version():
            age = time.monotonic() - view.loaded_at
            if age < snapshot.MAX_AGE_S - REFRESH_AHEAD_S:
                return view
            if age < snapshot.MAX_AGE_S:
                self._refresh_ahead()
                return view
        view = self._view = await self._in_db(snapshot.current)
        return view

    def _refresh_ahead(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            return
        if self._db is None:
            self._db = ThreadPoolExecutor(1, thread_name_prefix="trafficmgr-db")
        max_age = snapshot.MAX_AGE_S - REFRESH_AHEAD_S
        self._refresh = self._db.submit(_with_connection, snapshot.current, max_age)
        self._refresh.add_done_callback(self._refreshed)

    def _refreshed(self, done: Future[snapshot.FleetView]) -> None:
        if done.exception() is None:
            self._view = done.result()

    # --- replies ------------------------------------------------------------------------------

    async def _send(
        self, send: Send, reply: Reply, secure: bool, allow: bytes | None = b"POST, OPTIONS"
    ) -> None:
        body = self._renderer.render(reply.body)
        headers = [
            (b"content-type", b"application/json"),
            (b"vary", b"Accept, Cookie"),
            *([(b"allow", allow)] if allow else []),
            *((k.lower().encode(), v.encode()) for k, v in reply.headers.items()),
            (b"content-length", str(len(body)).encode()),
            *http_settings().security[secure],
        ]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class PutBatch:
    """Heartbeats that reach the hot state in the same turn of the event loop share one
    Redis round trip (a pipeline of compare-and-sets, in arrival order).

    Nothing waits to fill a batch: the first heartbeat of a turn schedules the write for the
    end of the turn, and whatever other requests got that far meanwhile go with it.
    """

    def __init__(self) -> None:
        self._items: list[tuple[hotstate.HeartbeatPut, asyncio.Future[hotstate.PutResult]]] = []

    def put(self, put: hotstate.HeartbeatPut) -> asyncio.Future[hotstate.PutResult]:
        loop = asyncio.get_running_loop()
        if self._items and self._items[0][1].get_loop() is not loop:
            self._items = []  # left by a loop that was closed mid-turn (tests)
        if not self._items:
            loop.call_soon(self._flush)
        future: asyncio.Future[hotstate.PutResult] = loop.create_future()
        self._items.append((put, future))
        return future

    def _flush(self) -> None:
        items, self._items = self._items, []
        try:
            results = hotstate.get().put_heartbeats([put for put, _ in items])
        except Exception as exc:
            for _, future in items:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(items, results, strict=True):
            if not future.done():
                future.set_result(result)


def _failed(exc: BaseException, scope: Scope) -> Reply:
    """The reply to an error: 503 with Retry-After when a store the answer needs cannot be
    reached, else 500 in the error format (logged with its traceback; call in ``except``)."""
    path = str(scope.get("path", ""))
    if is_outage(exc):
        note_outage(exc, path)
        return Reply(503, outage_body(exc), outage_headers())
    log.exception("Internal Server Error: %s", path)
    return Reply(500, error_body("server_error", "internal error, see the log"), {})


def _with_connection(fn: Callable[..., T], *args: Any) -> T:
    close_old_connections()  # CONN_MAX_AGE and health checks, as Django does per request
    return fn(*args)
