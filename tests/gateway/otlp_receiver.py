"""An OTLP/HTTP trace receiver on loopback: what a collector sees from the gateway.

It accepts ``POST /v1/traces`` with an ``ExportTraceServiceRequest`` (protobuf, optionally
gzip), decodes it with ``opentelemetry-proto`` and keeps every span as a ``ReceivedSpan``
(ids as hex, attributes and events as plain dicts), answering as a collector does.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.gateway.world import LoopThread

KINDS = {
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
}


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    error: bool
    resource: dict[str, Any] = field(default_factory=dict)


def _values(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        assert isinstance(kv, KeyValue)
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


class OtlpReceiver:
    """``with OtlpReceiver() as r:`` serves on 127.0.0.1; ``r.endpoint`` is its base URL."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.content_types: set[str] = set()
        self._lock = threading.Lock()
        self._loop: LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self.endpoint = ""

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.endpoint = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        spans = [
            ReceivedSpan(
                span.name,
                KINDS.get(span.kind, str(span.kind)),
                span.trace_id.hex(),
                span.span_id.hex(),
                span.parent_span_id.hex(),
                span.start_time_unix_nano,
                span.end_time_unix_nano,
                _values(span.attributes),
                [(e.name, _values(e.attributes)) for e in span.events],
                span.status.code == span.status.STATUS_CODE_ERROR,
                _values(rs.resource.attributes),
            )
            for rs in message.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        with self._lock:
            self.posts += 1
            self.content_types.add(request.headers.get("Content-Type", ""))
            self.spans.extend(spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def trace(self, trace_id: str) -> dict[str, ReceivedSpan]:
        """Return one trace's spans by name (each name once per trace here)."""
        with self._lock:
            found = [s for s in self.spans if s.trace_id == trace_id]
        by_name = {s.name: s for s in found}
        assert len(by_name) == len(found), [s.name for s in found]
        return by_name

    def __enter__(self) -> OtlpReceiver:
        self._loop = LoopThread()
        self._loop.call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        if self._runner is not None:
            self._loop.call(self._runner.cleanup())
        self._loop.close()
