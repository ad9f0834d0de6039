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
import ipaddress
import logging
import os
import time
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from trafficmgr.gateway.body import Body, BodyError, parse_body, with_model
from trafficmgr.gateway.errors import error_response, refusal_response
from trafficmgr.gateway.metrics import GatewayMetrics
from trafficmgr.gateway.proxy import Exchange, Proxy, header_text
from trafficmgr.gateway.settings import GatewaySettings, IpNetwork, tracing_wanted
from trafficmgr.requestpath import (
    PRIORITY_HEADER,
    STRATEGY_HEADER,
    ClientIdentity,
    Refusal,
    RequestInfo,
    RequestPath,
)

if TYPE_CHECKING:
    from trafficmgr.gateway.tracing import GatewayTracer, RequestTrace

log = logging.getLogger("trafficmgr.gateway")
access_log = logging.getLogger("trafficmgr.gateway.access")

CORE: web.AppKey[RequestPath] = web.AppKey("core", RequestPath)
PROXY: web.AppKey[Proxy] = web.AppKey("proxy", Proxy)
METRICS: web.AppKey[GatewayMetrics] = web.AppKey("metrics", GatewayMetrics)
SETTINGS: web.AppKey[GatewaySettings] = web.AppKey("settings", GatewaySettings)
TRACER: web.AppKey[GatewayTracer | None] = web.AppKey("tracer")


def build_app(core: RequestPath, settings: GatewaySettings) -> web.Application:
    """Build the aiohttp application (the proxy's client session opens on startup)."""
    app = web.Application(client_max_size=settings.max_body_bytes)
    metrics = GatewayMetrics(core)
    proxy = Proxy(core, settings, metrics)
    app[CORE], app[PROXY], app[METRICS], app[SETTINGS] = core, proxy, metrics, settings
    app[TRACER] = _tracer(settings)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_text)
    app.on_startup.append(_start)
    app.on_cleanup.append(_stop)
    return app


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


async def _start(app: web.Application) -> None:
    await app[PROXY].start()


async def _stop(app: web.Application) -> None:
    await app[PROXY].close()
    tracer = app[TRACER]
    if tracer is not None:  # export what is buffered (blocking HTTP: off the loop)
        await asyncio.get_running_loop().run_in_executor(None, tracer.close)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _completion(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _completion(request, chat=False)


async def _completion(request: web.Request, chat: bool) -> web.StreamResponse:
    started = time.perf_counter()
    tracer = request.app[TRACER]
    if tracer is None:
        return await _handle(request, chat, started, None)
    trace = tracer.begin(request.headers, request.method, request.path, started)
    try:
        answer = await _handle(request, chat, started, trace)
    except BaseException:  # the client went away (handler cancelled)
        trace.finish(499, {}, cancelled=True)
        raise
    trace.finish(answer.status, answer.headers)
    return answer


async def _handle(
    request: web.Request, chat: bool, started: float, trace: RequestTrace | None
) -> web.StreamResponse:
    app = request.app
    core, settings = app[CORE], app[SETTINGS]
    given = request.headers.get("x-request-id")
    rid = header_text(given, 128) if given else os.urandom(16).hex()  # 32 hex digits
    headers = {"x-request-id": rid}
    refused = await _authenticate(request, core, headers)
    if isinstance(refused, web.Response):
        return _rejected(app, refused, "unauthorized", trace)
    length = request.content_length
    if length is not None and length > settings.max_body_bytes:
        return _rejected(app, _too_large(settings, headers), "too_large", trace)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _rejected(app, _too_large(settings, headers), "too_large", trace)
    try:
        body = parse_body(raw, chat)
    except BodyError as exc:
        response = error_response(400, exc.code, exc.message, param=exc.param, headers=headers)
        return _rejected(app, response, exc.code, trace)
    info = _request_info(request, body, refused, rid, settings.trusted_proxies)
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
    app[METRICS].routing.observe(result.routing_s)
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
    answer = await app[PROXY].forward(exchange)
    if settings.access_log:
        _log_access(request, info, answer, started)
    return answer


def _log_access(
    request: web.Request, info: RequestInfo, answer: web.StreamResponse, started: float
) -> None:
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
    request: web.Request, core: RequestPath, headers: dict[str, str]
) -> ClientIdentity | web.Response:
    """Return the client's identity, or the 401 to answer."""
    auth = request.headers.get("Authorization", "")
    scheme, _, token = auth.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return error_response(
            401,
            "invalid_api_key",
            "missing bearer token: send Authorization: Bearer <token>",
            headers=headers,
        )
    hit, who = core.cached_identity(token)
    if not hit:
        who = await asyncio.get_running_loop().run_in_executor(None, core.authenticate, token)
    if who is None:
        return error_response(401, "invalid_api_key", "unknown or revoked token", headers=headers)
    return who


def _too_large(settings: GatewaySettings, headers: dict[str, str]) -> web.Response:
    return error_response(
        413,
        "request_too_large",
        f"request body larger than {settings.max_body_bytes} bytes",
        headers=headers,
    )


def _rejected(
    app: web.Application, response: web.Response, reason: str, trace: RequestTrace | None
) -> web.Response:
    app[METRICS].rejected(reason)
    if trace is not None:
        trace.error = reason
    return response


def _request_info(
    request: web.Request,
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


def client_address(request: web.Request, trusted: tuple[IpNetwork, ...]) -> str | None:
    """Return the client's address: the peer's, or X-Forwarded-For's from a trusted proxy."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    address = str(peer[0]) if isinstance(peer, tuple) and peer else None
    if address is None or not trusted or not _classify(address, trusted):
        return address
    forwarded = request.headers.get("X-Forwarded-For")
    if not forwarded:
        return address
    for hop in reversed([h.strip() for h in forwarded.split(",")]):
        kind = _classify(hop, trusted)
        if kind is None:
            return address  # a malformed chain says nothing reliable
        if not kind:
            return hop
        address = hop
    return address


@functools.lru_cache(maxsize=16_384)
def _classify(address: str, trusted: tuple[IpNetwork, ...]) -> bool | None:
    """Return whether ``address`` is a trusted proxy; None when it is not an address.

    Cached: the same proxies and clients come back request after request, and parsing an
    address costs more than the rest of this function's callers together."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return any(ip in net for net in trusted)


async def list_models(request: web.Request) -> web.Response:
    core = request.app[CORE]
    refused = await _authenticate(request, core, {})
    if isinstance(refused, web.Response):
        return refused
    data = [
        {"id": m, "object": "model", "created": 0, "owned_by": "trafficmgr"} for m in core.models()
    ]
    return web.Response(
        body=msgspec.json.encode({"object": "list", "data": data}),
        content_type="application/json",
    )


async def healthz(request: web.Request) -> web.Response:
    core = request.app[CORE]
    snap = core.snapshot()
    doc = {
        "status": "ok",
        "table": snap.table.version,
        "table_kind": snap.table_kind,
        "in_flight": core.ledger.total,
        "queued": core.queue.depth(),
    }
    return web.Response(body=msgspec.json.encode(doc), content_type="application/json")


async def metrics_text(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
