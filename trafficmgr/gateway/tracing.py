"""OpenTelemetry spans for the gateway's requests, exported over OTLP/HTTP (protobuf).

Off unless asked (``settings.tracing_wanted``: the standard ``OTEL_*`` variables or
``--otlp-endpoint``): this module, and with it the SDK, is imported only when tracing is on,
so a gateway without it pays one ``is None`` test per hook and nothing else.

One trace per request, continuing the client's W3C ``traceparent`` when it sent one:

- ``POST /v1/...`` (server span): the whole request, arrival to last byte;
- ``queue``: the admission wait, only when the request waited (a saturated region);
- ``decision``: the routing decision that placed it (or refused it);
- ``upstream`` (client span): from the first attempt to the answer's end; a failed attempt
  before the first byte is an ``attempt_failed`` event on it, and the next target is tried.
  Its context is what the endpoint receives as ``traceparent``.

Attribute names follow OpenTelemetry's semantic conventions where they exist (HTTP:
``http.request.method``, ``http.route``, ``http.response.status_code``, ``client.address``,
``server.address``/``server.port``, ``error.type``; GenAI: ``gen_ai.operation.name``,
``gen_ai.request.model``, ``gen_ai.request.max_tokens``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``); the gateway's own are ``trafficmgr.*``. The decision and
queue spans are recorded after the fact from the core's own timings (``Plan.routing_s``,
``queued_s``), so the core stays free of tracing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, MutableMapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from trafficmgr.gateway.settings import GatewaySettings
from trafficmgr.requestpath import Outcome, Plan, Refusal, Target, Usage

SERVICE_NAME = "trafficmgr-gateway"
SCOPE = "trafficmgr.gateway"
_PROPAGATOR = TraceContextTextMapPropagator()
Attributes = dict[str, str | int | float | bool]


class GatewayTracer:
    """One process's tracer provider, exporter and batch processor."""

    def __init__(self, settings: GatewaySettings, environ: Mapping[str, str] = os.environ):
        extra: Attributes = {}
        if not environ.get("OTEL_SERVICE_NAME"):
            extra["service.name"] = SERVICE_NAME
        endpoint = settings.otlp_endpoint
        exporter = OTLPSpanExporter(
            endpoint=endpoint.rstrip("/") + "/v1/traces" if endpoint else None
        )
        self.provider = TracerProvider(resource=Resource.create(extra), shutdown_on_exit=False)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer(SCOPE)

    def begin(
        self, headers: Mapping[str, str], method: str, route: str, started: float
    ) -> RequestTrace:
        """Open the server span of a request that arrived at ``started`` (perf_counter)."""
        return RequestTrace(self.tracer, headers, method, route, started)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export what is buffered now (blocking)."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def close(self) -> None:
        """Export what is buffered and stop the exporter (blocking)."""
        self.provider.shutdown()


class RequestTrace:
    """The spans of one request; the gateway calls one method per step it reaches."""

    __slots__ = (
        "_ctx",
        "_origin",
        "_origin_ns",
        "_tracer",
        "attempts",
        "error",
        "server",
        "upstream",
    )

    def __init__(
        self,
        tracer: trace.Tracer,
        headers: Mapping[str, str],
        method: str,
        route: str,
        started: float,
    ) -> None:
        self._tracer = tracer
        self._origin, self._origin_ns = started, time.time_ns()
        self._origin_ns -= int((time.perf_counter() - started) * 1e9)
        parent = _PROPAGATOR.extract(headers)
        attributes: Attributes = {"http.request.method": method, "http.route": route}
        attributes["url.path"] = route
        attributes["gen_ai.operation.name"] = (
            "chat" if route.endswith("chat/completions") else ("text_completion")
        )
        self.server = tracer.start_span(
            f"{method} {route}", parent, SpanKind.SERVER, attributes, start_time=self._origin_ns
        )
        self._ctx = trace.set_span_in_context(self.server)
        self.upstream: Span | None = None
        self.attempts = 0
        self.error: str | None = None  # why the gateway refused or failed the request

    def _ns(self, at: float) -> int:
        """Return a perf_counter instant as the epoch nanoseconds spans are stamped in."""
        return self._origin_ns + int((at - self._origin) * 1e9)

    def request(self, model: str, max_tokens: int, client_ip: str | None, request_id: str) -> None:
        """Record what the client asked for."""
        s = self.server
        s.set_attribute("gen_ai.request.model", model)
        if max_tokens:
            s.set_attribute("gen_ai.request.max_tokens", max_tokens)
        if client_ip:
            s.set_attribute("client.address", client_ip)
        s.set_attribute("trafficmgr.request_id", request_id)

    def admitted(self, result: Plan | Refusal, began: float, ended: float) -> None:
        """Record the admission wait and the decision (``began``/``ended``: perf_counter)."""
        if isinstance(result, Refusal):
            waited = result.code == "saturated"
            if waited:
                self._child("queue", began, ended, {}, result.code, result.message)
            else:
                self._child("decision", began, ended, {}, result.code, result.message)
            return
        decided = max(began, ended - result.routing_s) if result.queued_s > 0 else began
        if result.queued_s > 0:
            self._child("queue", began, decided, {"trafficmgr.queued_s": result.queued_s})
        pick = result.targets[0] if result.targets else None
        attributes: Attributes = {
            "gen_ai.request.model": result.model,
            "trafficmgr.region": result.region,
            "trafficmgr.reason": result.reason,
            "trafficmgr.targets": len(result.targets),
        }
        if pick is not None:
            attributes["trafficmgr.endpoint"] = pick.name
        self._child("decision", decided, ended, attributes)

    def _child(
        self,
        name: str,
        began: float,
        ended: float,
        attributes: Attributes,
        error: str | None = None,
        message: str = "",
    ) -> None:
        span = self._tracer.start_span(
            name, self._ctx, SpanKind.INTERNAL, attributes, start_time=self._ns(began)
        )
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(StatusCode.ERROR, message[:256])
        span.end(end_time=self._ns(ended))

    def attempt(self, target: Target, model: str, headers: MutableMapping[str, str]) -> None:
        """Record an attempt sent to ``target`` and put its ``traceparent`` in ``headers``."""
        self.attempts += 1
        span = self.upstream
        if span is None:
            attributes: Attributes = {"gen_ai.request.model": model}
            span = self.upstream = self._tracer.start_span(
                "upstream", self._ctx, SpanKind.CLIENT, attributes
            )
        host, _, port = target.address.rpartition(":")
        span.set_attribute("trafficmgr.endpoint", target.name)
        span.set_attribute("trafficmgr.region", target.region)
        span.set_attribute("server.address", host)
        if port.isdigit():
            span.set_attribute("server.port", int(port))
        span.set_attribute("trafficmgr.attempts", self.attempts)
        _PROPAGATOR.inject(headers, trace.set_span_in_context(span))

    def attempt_failed(self, target: Target, outcome: Outcome, message: str) -> None:
        """Record an attempt that failed before its first byte (the next target follows)."""
        if self.upstream is not None:
            self.upstream.add_event(
                "attempt_failed",
                {
                    "trafficmgr.endpoint": target.name,
                    "trafficmgr.region": target.region,
                    "trafficmgr.outcome": outcome.value,
                    "exception.message": message[:256],
                },
            )

    def answered(
        self, status: int, usage: Usage | None, outcome: Outcome, ttft_s: float | None
    ) -> None:
        """Close the upstream span with the answer's status, usage and outcome."""
        span = self.upstream
        if span is None:
            return
        span.set_attribute("http.response.status_code", status)
        if usage is not None:
            if usage.prompt_tokens:
                span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                self.server.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
            self.server.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        if ttft_s is not None:
            span.set_attribute("trafficmgr.ttft_s", ttft_s)
        if outcome is not Outcome.OK and outcome is not Outcome.CLIENT_ERROR:
            span.set_attribute("trafficmgr.outcome", outcome.value)
            span.set_attribute("error.type", outcome.value)
            span.set_status(StatusCode.ERROR)
        span.end()
        self.upstream = None

    def finish(self, status: int, headers: Mapping[str, str], cancelled: bool = False) -> None:
        """Close the server span (and an upstream span no answer closed)."""
        s, error = self.server, "cancelled" if cancelled else self.error
        s.set_attribute("http.response.status_code", status)
        region, endpoint = headers.get("x-trafficmgr-region"), headers.get("x-trafficmgr-endpoint")
        if region:
            s.set_attribute("trafficmgr.region", region)
        if endpoint:
            s.set_attribute("trafficmgr.endpoint", endpoint)
        if error is None and status >= 400:
            error = str(status)
        if self.upstream is not None:
            self.upstream.set_attribute("error.type", error or "no_answer")
            self.upstream.set_status(StatusCode.ERROR)
            self.upstream.end()
            self.upstream = None
        if error is not None:
            s.set_attribute("error.type", error)
            if status >= 500 or error == "cancelled":
                s.set_status(StatusCode.ERROR)
        s.end()
