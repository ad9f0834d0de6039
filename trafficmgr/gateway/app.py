"""The gateway's HTTP face: OpenAI's routes, authentication, client address, refusals.

Per request, in order: ``x-request-id`` (honoured, else generated; returned, sent upstream,
logged); the bearer token (401, OpenAI's error shape); the body size (413, from
``Content-Length`` before reading); the body (400 naming the field); the core's decision
(400 bad header, 404 unknown model, 429 saturated, 503 nothing eligible, with Retry-After);
then the proxy. With tracing on (``tracing``), each step is also a span. The client's
address is the peer's, or the first address in ``X-Forwarded-For`` (from the right) that is
not a trusted proxy when the peer is one.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from trafficmgr.gateway.body import Body, BodyError, parse_body, with_model
from trafficmgr.gateway.errors import error_response, refusal_response
from trafficmgr.gateway.http import Answer, BodyTooLarge, Request, Response
from trafficmgr.gateway.metrics import GatewayMetrics, WorkerShare
from trafficmgr.gateway.proxy import Exchange, Proxy, header_text
from trafficmgr.gateway.settings import GatewaySettings, IpNetwork, tracing_wanted
from trafficmgr.requestpath import (
    PRIORITY_HEADER,
    STRATEGY_HEADER,
    ClientIdentity,
    Refusal,
    RequestInfo,
    RequestPath,
    bearer_token,
)
from trafficmgr.requestpath.reading import client_address as shared_client_address

if TYPE_CHECKING:
    from trafficmgr.gateway.tracing import GatewayTracer, RequestTrace

log = logging.getLogger("trafficmgr.gateway")
WIRE_CODES = {
    400: "bad_request",
    408: "request_timeout",  # a head or body too slow (the HTTP layer's deadlines)
    431: "headers_too_large",
    500: "internal_error",
    503: "too_many_connections",  # past the per-worker or per-client connection cap
}
access_log = logging.getLogger("trafficmgr.gateway.access")
# Request ids: 128 random bits from a generator seeded by the OS (again in a forked worker),
# not one ``getrandom`` system call per request: an id must be unique, not secret.
_IDS = random.Random()
os.register_at_fork(after_in_child=_IDS.seed)


class GatewayApp:
    """The routes, and what every request needs: the core, the proxy, metrics, settings."""

    def __init__(self, core: RequestPath, settings: GatewaySettings) -> None:
        """Build on the loop that will serve it."""
        self.core = core
        self.settings = settings
        share = WorkerShare(settings.metrics_dir) if settings.metrics_dir else None
        self.metrics = GatewayMetrics(core, share)
        self.proxy = Proxy(core, settings, self.metrics, asyncio.get_running_loop())
        self.tracer = _tracer(settings)
        self.routes: dict[tuple[str, str], Callable[[GatewayApp, Request], Awaitable[Answer]]] = {
            # one coroutine fewer per request than a function that awaits _completion
            ("POST", "/v1/chat/completions"): functools.partial(_completion, chat=True),
            ("POST", "/v1/completions"): functools.partial(_completion, chat=False),
            ("GET", "/v1/models"): list_models,
            ("GET", "/healthz"): healthz,
            ("GET", "/metrics"): metrics_text,
        }
        self._paths = {path for _, path in self.routes}

    def __call__(self, request: Request) -> Awaitable[Answer]:
        # the route's own coroutine, not one awaiting it: a coroutine frame fewer a request
        route = self.routes.get((request.method, request.path))
        if route is not None:
            return route(self, request)
        return self._unrouted(request)

    async def _unrouted(self, request: Request) -> Answer:
        if request.path in self._paths:
            allowed = ", ".join(m for m, p in self.routes if p == request.path)
            return error_response(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed on {request.path}; use {allowed}",
                headers={"Allow": allowed},
            )
        return error_response(404, "not_found", f"no route {request.method} {request.path}")

    def refusal(self, status: int, message: str) -> Response:
        """The answer to a request refused at the wire (``http``: bad bytes, a head too
        large, an unhandled error), in the same OpenAI shape as every other refusal."""
        return error_response(status, WIRE_CODES.get(status, "bad_request"), message)

    async def stop(self) -> None:
        await self.proxy.close()
        if self.tracer is not None:  # export what is buffered (blocking HTTP: off the loop)
            await asyncio.get_running_loop().run_in_executor(None, self.tracer.close)


def _tracer(settings: GatewaySettings) -> GatewayTracer | None:
    """Return the tracer when tracing is wanted; the SDK is imported only then."""
    if not tracing_wanted(settings, os.environ):
        return None
    try:
        from trafficmgr.gateway.tracing import GatewayTracer  # optional extra: [otel]
    except ImportError as exc:
        if "opentelemetry.proto" in str(exc):  # installed, but its files overwritten
            raise RuntimeError(
                f"tracing is on but OpenTelemetry's protobuf modules are an older copy ({exc}): "
                "xds-protos installs one in the same files; reinstall opentelemetry-proto last: "
                "pip install --force-reinstall --no-deps opentelemetry-proto==<its version>"
            ) from None
        raise RuntimeError(
            f"tracing is on but OpenTelemetry is not installed ({exc}): "
            "pip install 'trafficmgr[otel]', or unset OTEL_TRACES_EXPORTER / --otlp-endpoint"
        ) from None
    return GatewayTracer(settings)


def _completion(app: GatewayApp, request: Request, chat: bool) -> Awaitable[Answer]:
    started = time.perf_counter()
    if app.tracer is None:  # the handler's coroutine itself: no frame around it
        return _handle(app, request, chat, started, None)
    return _traced(app, app.tracer, request, chat, started)


async def _traced(
    app: GatewayApp, tracer: GatewayTracer, request: Request, chat: bool, started: float
) -> Answer:
    trace = tracer.begin(request.headers, request.method, request.path, started)
    try:
        answer = await _handle(app, request, chat, started, trace)
    except BaseException:  # the client went away (handler cancelled)
        trace.finish(499, {}, cancelled=True)
        raise
    trace.finish(answer.status, answer.headers)
    return answer


async def _handle(
    app: GatewayApp, request: Request, chat: bool, started: float, trace: RequestTrace | None
) -> Answer:
    core, settings = app.core, app.settings
    given = request.headers.get("x-request-id")
    rid = header_text(given, 128) if given else f"{_IDS.getrandbits(128):032x}"  # 32 hex digits
    headers = {"x-request-id": rid}
    token = bearer_token(request.headers)
    _, who = core.cached_identity(token) if token else (False, None)
    if who is None:  # not seen lately, unknown or none: the whole check answers
        checked = await _authenticate(app, request, token)
        if isinstance(checked, Refusal):
            reason = "unauthorized" if checked.status == 401 else checked.code
            return _rejected(app, refusal_response(checked, headers), reason, trace)
        who = checked
    length = request.content_length
    if length is not None and length > settings.max_body_bytes:
        return _rejected(app, _too_large(settings, headers), "too_large", trace)
    try:
        raw = request.arrived() or await request.read()
    except BodyTooLarge:
        return _rejected(app, _too_large(settings, headers), "too_large", trace)
    try:
        body = parse_body(raw, chat)
    except BodyError as exc:
        response = error_response(400, exc.code, exc.message, param=exc.param, headers=headers)
        return _rejected(app, response, exc.code, trace)
    info = _request_info(request, body, who, rid, settings.trusted_proxies)
    if trace is None:
        result = await core.admit(info)
    else:
        trace.request(body.model, body.max_tokens, info.client_ip, rid)
        began = time.perf_counter()
        result = await core.admit(info)
        trace.admitted(result, began, time.perf_counter())
    if isinstance(result, Refusal):
        headers["x-trafficmgr-reason"] = header_text(result.message)
        return _rejected(app, refusal_response(result, headers), result.code, trace)
    app.metrics.routing.observe(result.routing_s)
    if result.model != body.model:
        raw = with_model(body.doc, result.model)
    exchange = Exchange(
        request,
        result,
        raw,
        request.path,
        body.stream,
        started,
        rid,
        body.model,
        trace,
    )
    answer = await app.proxy.forward(exchange)
    if settings.access_log:
        _log_access(request, info, answer, started)
    return answer


def _log_access(request: Request, info: RequestInfo, answer: Answer, started: float) -> None:
    access_log.info(
        "%s %s %s model=%s endpoint=%s status=%d %.1fms",
        info.request_id,
        info.client_ip,
        request.path,
        info.model,
        answer.headers.get("x-trafficmgr-endpoint", "-"),
        answer.status,
        (time.perf_counter() - started) * 1000,
    )


async def _authenticate(
    app: GatewayApp, request: Request, token: str | None
) -> ClientIdentity | Refusal:
    """Return the identity of the bearer ``token``, or the 401, 429 or 503 to answer."""
    client = client_address(request, app.settings.trusted_proxies)
    return await app.core.identify(token, client)


def _too_large(settings: GatewaySettings, headers: dict[str, str]) -> Response:
    return error_response(
        413,
        "request_too_large",
        f"request body larger than {settings.max_body_bytes} bytes",
        headers=headers,
    )


def _rejected(
    app: GatewayApp, response: Response, reason: str, trace: RequestTrace | None
) -> Response:
    app.metrics.rejected(reason)
    if trace is not None:
        trace.error = reason
    return response


def _request_info(
    request: Request,
    body: Body,
    who: ClientIdentity,
    rid: str,
    trusted: tuple[IpNetwork, ...],
) -> RequestInfo:
    h = request.headers
    return RequestInfo(
        model=body.model,
        client_ip=client_address(request, trusted),
        identity=who,
        priority=h.get(PRIORITY_HEADER),
        strategy=h.get(STRATEGY_HEADER),
        session_id=h.get("x-session-id") or body.user,
        prompt=body.prompt,
        max_output_tokens=body.max_tokens,
        request_id=rid,
    )


def client_address(request: Request, trusted: tuple[IpNetwork, ...]) -> str | None:
    """Return the client's address: the peer's, or X-Forwarded-For's from a trusted proxy."""
    peer = request.peer[0] if request.peer else None
    if not trusted:  # the usual case: nothing to walk
        return peer
    return shared_client_address(peer, request.headers.get("x-forwarded-for"), trusted)


async def list_models(app: GatewayApp, request: Request) -> Answer:
    core = app.core
    refused = await _authenticate(app, request, bearer_token(request.headers))
    if isinstance(refused, Refusal):
        return refusal_response(refused, {})
    data = [
        {"id": m, "object": "model", "created": 0, "owned_by": "trafficmgr"} for m in core.models()
    ]
    return Response(
        body=msgspec.json.encode({"object": "list", "data": data}),
        content_type="application/json",
    )


async def healthz(app: GatewayApp, request: Request) -> Answer:
    """Answer liveness to anyone (probes carry no token); the detail only to an operator."""
    core = app.core
    snap = core.snapshot()
    doc: dict[str, object] = {"status": "ok"}
    if _operator(app, request):
        doc["table"] = snap.table.version
        doc["table_kind"] = snap.table_kind
        doc["in_flight"] = core.ledger.total
        doc["queued"] = core.queue.depth()
        sharing = core.sharing
        doc["shared_state"] = sharing.status() if sharing is not None else {"enabled": False}
    return Response(body=msgspec.json.encode(doc), content_type="application/json")


async def metrics_text(app: GatewayApp, request: Request) -> Answer:
    if not _operator(app, request):
        return Response(
            status=401,
            body=b"metrics need a bearer token\n",
            headers={"WWW-Authenticate": "Bearer"},
            content_type="text/plain",
        )
    body = app.metrics.render()
    return Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def _operator(app: GatewayApp, request: Request) -> bool:
    """Whether ``request`` may read operational figures: no metrics token is set, or it
    carries that token (compared in constant time, as the control plane's /metrics does)."""
    wanted = app.settings.metrics_token
    if not wanted:
        return True
    given = request.headers.get("authorization", "").encode("utf-8", "replace")
    return hmac.compare_digest(given, f"Bearer {wanted}".encode())
