"""One HTTP request's ext_proc exchange: a state machine from Envoy's messages to replies.

Envoy opens one gRPC stream per HTTP request and sends, in order, the request headers,
body (and trailers), then the response headers and body. This class answers each message
and keeps the request's accounting right: whatever the stream does (ends early, errors,
never sends a response), ``close`` reports the request finished exactly once.

Body modes: in ``BUFFERED`` Envoy waits for the headers reply before sending the body, so
headers are answered at once and the destination is set with the body reply; in
``FULL_DUPLEX_STREAMED`` Envoy streams on, so the headers reply waits until the body is
complete and the body goes back as streamed chunks (the reference EPP does the same). In
``STREAMED`` with ``send_body_without_waiting_for_header_response`` the body's chunks follow
the headers at once too: the headers reply (with the destination) waits for the last chunk,
then each chunk is answered in order, unchanged. That saves the round trip ``BUFFERED``
spends on an empty headers reply; ``STREAMED`` without it could never route (the upstream
request starts with the headers), so it is answered 500.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from envoy.config.core.v3.base_pb2 import HeaderMap
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse
from google.protobuf.struct_pb2 import Struct

from trafficmgr.epp import wire
from trafficmgr.epp.decision import ClientIdentity, Decision, Outcome, Plan, Refusal, RequestInfo
from trafficmgr.epp.request import (
    client_address,
    header_dict,
    parse_body,
    request_info,
    rewrite_model,
    subset_hint,
)
from trafficmgr.epp.usage import ResponseReader
from trafficmgr.requestpath import bearer_token
from trafficmgr.requestpath.reading import IpNetwork

FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
STREAMED = ProcessingMode.STREAMED
MODELS_PATH = "/v1/models"


@dataclass(frozen=True, slots=True)
class ExchangeSettings:
    max_body_bytes: int = 4 << 20
    # proxies in front of Envoy whose x-forwarded-for entries are believed (the gateway's rule)
    trusted_proxies: tuple[IpNetwork, ...] = ()
    full_duplex: bool = False  # body mode assumed when Envoy does not say (protocol_config)
    # (region, address) of every endpoint in Envoy's bootstrap (``--envoy-bootstrap``): a plan
    # naming another is refused, never sent; None: not checked
    envoy_endpoints: frozenset[tuple[str, str]] | None = None


class Exchange:
    """Answers the messages of one ext_proc stream; ``done`` once nothing more is due."""

    def __init__(self, decision: Decision, settings: ExchangeSettings) -> None:
        self.decision = decision
        self.settings = settings
        self.done = False
        self._full_duplex = settings.full_duplex
        self._streamed = False  # STREAMED request body, sent without waiting for our reply
        self._chunks = 0  # request body chunks not answered yet (STREAMED)
        self._headers: dict[str, str] = {}
        self._subset: frozenset[str] | None = None
        self._identity: ClientIdentity | None = None
        self._body = bytearray()
        self._started = time.monotonic()
        self._plan: Plan | None = None
        self._sent: tuple[str, ...] = ()  # the addresses Envoy was given, in order
        self._overhead_ms = 0.0
        self._served: str | None = None
        self._reader: ResponseReader | None = None
        self._outcome = Outcome.OK
        self._finished = False
        self._body_changed = False

    async def handle(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        """The replies to one message from Envoy (none while a body is being gathered)."""
        kind = message.WhichOneof("request")
        if kind is None or (kind.startswith("request_") and self._out_of_order(kind)):
            return self._refuse(_OUT_OF_ORDER)
        if message.HasField("protocol_config"):
            config = message.protocol_config
            self._full_duplex = config.request_body_mode == FULL_DUPLEX
            self._streamed = config.request_body_mode == STREAMED
            if self._streamed and not config.send_body_without_waiting_for_header_response:
                return self._refuse(_UNROUTABLE)
        if kind == "request_headers":
            return await self._on_request_headers(message)
        if kind == "request_body":
            return await self._on_request_body(message)
        if kind == "request_trailers":
            return await self._on_request_trailers(message)
        if kind == "response_body":
            return self._on_response_body(message)
        if kind == "response_headers":
            return self._on_response_headers(message)
        if kind == "response_trailers":
            return self._on_response_trailers(message)
        return []

    def _out_of_order(self, kind: str) -> bool:
        """Whether a request message breaks the order Envoy keeps: headers once, first.

        The body is routed only after headers whose token was checked (``_identity``), so a
        peer that skips or repeats them is refused, never routed.
        """
        return (self._identity is None) != (kind == "request_headers")

    def close(self) -> None:
        """End the request's accounting if the stream ends before the response did.

        The usual cause is the client going away (Envoy then resets the stream), which says
        nothing about the endpoint: the request counts as cancelled. A stream whose
        ``data: [DONE]`` (or ``finish_reason``, or usage) was already read is whole: a client
        that closes on it may have Envoy reset the stream before it sends the body's end, and
        the request still counts as answered.
        """
        if self._plan is not None and not self._finished:
            if self._reader is None or not self._reader.answered:
                self._outcome = Outcome.CANCELLED
            self._finish()

    # --- request ------------------------------------------------------------------------

    async def _on_request_headers(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        self._headers = header_dict(message.request_headers.headers)
        self._subset = subset_hint(message.metadata_context)
        checked = await self._authenticate(bearer_token(self._headers))
        if isinstance(checked, Refusal):  # 401, or 429/503 before the source is asked
            return self._refuse(checked)
        self._identity = checked
        if self._headers.get(":method") == "GET":
            listing = self._model_listing(self._headers.get(":path", ""))
            if listing is not None:
                self.done = True
                return [listing]
        if message.request_headers.end_of_stream:
            return self._refuse(
                Refusal(400, "missing_body", "a request to route needs a JSON body naming a model")
            )
        if self._full_duplex or self._streamed:
            return []  # answered with the destination once the body is complete
        return [wire.request_headers_response({})]

    def _model_listing(self, path: str) -> ProcessingResponse | None:
        """``GET /v1/models`` and ``/v1/models/{id}`` from the core's fleet; None: not one."""
        path = path.partition("?")[0].rstrip("/")
        if path == MODELS_PATH:
            return wire.immediate_json(200, wire.models_body(self.decision.models()), "models")
        if not path.startswith(MODELS_PATH + "/"):
            return None
        model = unquote(path[len(MODELS_PATH) + 1 :])
        if model in self.decision.models():
            return wire.immediate_json(200, wire.model_body(model), "models")
        return self._refuse(
            Refusal(404, "model_not_found", f"no endpoint serves {model!r}", param="model")
        )[0]

    async def _authenticate(self, token: str | None) -> ClientIdentity | Refusal:
        _, identity = self.decision.cached_identity(token) if token else (False, None)
        if identity is not None:
            return identity
        client = client_address(self._headers, self.settings.trusted_proxies)
        return await self.decision.identify(token, client)

    async def _on_request_body(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        body = message.request_body
        self._body += body.body
        if len(self._body) > self.settings.max_body_bytes:
            limit = self.settings.max_body_bytes
            return self._refuse(
                Refusal(413, "body_too_large", f"request body over {limit} bytes", param="body")
            )
        self._chunks += 1
        if not body.end_of_stream:
            if self._full_duplex or self._streamed:
                return []
            return [wire.request_body_response()]
        return await self._route(trailers_follow=False)

    async def _on_request_trailers(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        if self._full_duplex and self._plan is None and not self.done:
            routed = await self._route(trailers_follow=True)
            return routed if self.done else [*routed, wire.trailers_response(request=True)]
        return [wire.trailers_response(request=True)]

    async def _route(self, trailers_follow: bool) -> list[ProcessingResponse]:
        info = self._request_info()
        if isinstance(info, Refusal):
            return self._refuse(info)
        outcome = await self.decision.admit(info)
        if isinstance(outcome, Refusal):
            return self._refuse(outcome)
        self._plan = outcome
        unsendable = self._unsendable(outcome)
        if unsendable is not None:
            self._outcome = Outcome.CANCELLED
            self._finish()
            return self._refuse(unsendable)
        self._overhead_ms = (time.monotonic() - self._started) * 1000.0
        if outcome.model != info.model:
            self._body = bytearray(rewrite_model(bytes(self._body), outcome.model))
            self._body_changed = True
        return self._destination(outcome, trailers_follow)

    def _unsendable(self, plan: Plan) -> Refusal | None:
        """Why Envoy could not follow ``plan`` exactly, if it could not.

        An endpoint missing from Envoy's bootstrap (added or readdressed since it was
        generated, or left out by ``--region``) would not be found by ``override_host``, and
        Envoy would send the request elsewhere: refused instead, naming the endpoints.
        """
        if not plan.targets:
            return Refusal(503, "no_endpoint", "no endpoint is eligible", 1)
        known = self.settings.envoy_endpoints
        missing = [
            t for t in plan.targets if known is not None and (t.region, t.address) not in known
        ]
        if not missing:
            return None
        names = ", ".join(f"{t.name} ({t.address} in {t.region})" for t in missing)
        return Refusal(
            503,
            "endpoint_not_in_envoy",
            f"{names} not in Envoy's configuration: regenerate its bootstrap from the fleet",
        )

    def _request_info(self) -> RequestInfo | Refusal:
        parsed = parse_body(bytes(self._body), self._headers.get(":path", ""))
        if isinstance(parsed, Refusal):
            return parsed
        return request_info(
            self._headers, parsed, self._identity, self._subset, self.settings.trusted_proxies
        )

    def _destination(self, plan: Plan, trailers_follow: bool) -> list[ProcessingResponse]:
        # Envoy holds one cluster per region and retries inside the one it picked: the list
        # is the first target's region's part of the plan, so no fallback leaves that region
        region = plan.targets[0].region
        self._sent = tuple(t.address for t in plan.targets if t.region == region)
        headers = {
            wire.DESTINATION_KEY: ",".join(self._sent),
            wire.MAX_RETRIES_HEADER: str(len(self._sent) - 1),
            wire.CLUSTER_HEADER: wire.cluster_name(region),
        }
        metadata = wire.destination_metadata(self._sent)
        if self._streamed:
            return self._streamed_destination(headers, metadata)
        if not self._full_duplex:
            if not self._body_changed:
                return [wire.request_body_response(headers, metadata)]
            headers["content-length"] = str(len(self._body))
            return [wire.request_body_response(headers, metadata, bytes(self._body))]
        body = bytes(self._body)
        self._body = bytearray()
        return [
            wire.request_headers_response(headers, metadata),
            *wire.streamed_body(body, end_of_stream=not trailers_follow, request=True),
        ]

    def _streamed_destination(
        self, headers: dict[str, str], metadata: Struct
    ) -> list[ProcessingResponse]:
        """The held headers reply, then one reply per chunk (a new body goes in the last)."""
        chunks, self._chunks = self._chunks, 0
        if not self._body_changed:
            replies = [wire.request_body_response() for _ in range(chunks)]
        else:
            headers["content-length"] = str(len(self._body))
            replies = [wire.request_body_response(clear=True) for _ in range(chunks - 1)]
            replies.append(wire.request_body_response(body=bytes(self._body)))
        return [wire.request_headers_response(headers, metadata), *replies]

    def _refuse(self, refusal: Refusal) -> list[ProcessingResponse]:
        self.done = True
        headers = {wire.REASON_HEADER: refusal.code}
        return [
            wire.immediate_response(
                refusal.status,
                refusal.code,
                refusal.message,
                refusal.retry_after_s,
                refusal.error_type,
                headers,
            )
        ]

    # --- response -----------------------------------------------------------------------

    def _on_response_headers(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        if self._plan is None or self._reader is not None or self._finished:
            # not a response to a request this stream routed (or a second one): a peer
            # forging statuses or served endpoints reaches no accounting and no ejection
            return [wire.response_headers_response({})]
        status, content_type = _status_and_type(message.response_headers.headers)
        self._served = _served_endpoint(message)
        self._outcome = _outcome_of(status)
        self._report_attempts(self._plan)
        streaming = "text/event-stream" in content_type
        self._reader = ResponseReader(streaming)
        replies = [wire.response_headers_response(self._response_headers())]
        if message.response_headers.end_of_stream:
            self._finish()
        return replies

    def _report_attempts(self, plan: Plan) -> None:
        """Replay Envoy's retries to the core: each endpoint it went past, then the last.

        Envoy moves down the list on connect failures, refused or reset streams and 503s;
        the EPP sees only where it ended, so each endpoint skipped counts as a server error.
        The pick is already counted on the first endpoint: ``served`` is for the others.
        """
        addresses = self._sent
        if self._served is None or self._served not in addresses:
            return
        for index, address in enumerate(addresses[: addresses.index(self._served) + 1]):
            if index:
                self.decision.served(plan.handle, address)
            if address != self._served:
                self.decision.attempt_failed(plan.handle, Outcome.SERVER_ERROR)

    def _on_response_body(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        body = message.response_body
        if self._reader is not None and self._plan is not None:
            tokens = self._reader.feed(body.body)
            if tokens:
                self.decision.progress(self._plan.handle, tokens)
        if body.end_of_stream:
            self._finish()
        if self._full_duplex:
            return list(wire.streamed_body(body.body, body.end_of_stream, request=False))
        return [wire.response_body_response()]

    def _on_response_trailers(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        self._finish()
        return [wire.trailers_response(request=False)]

    def _response_headers(self) -> Mapping[str, str]:
        if self._plan is None:
            return {}
        names = {t.address: t.name for t in self._plan.targets}
        address = self._served or self._plan.targets[0].address
        region = next((t.region for t in self._plan.targets if t.address == address), None)
        return {
            wire.REGION_HEADER: region or self._plan.region,
            wire.ENDPOINT_HEADER: names.get(address, address),
            wire.REASON_HEADER: wire.header_text(self._plan.reason),
            wire.OVERHEAD_HEADER: f"{self._overhead_ms:.2f}",
        }

    def _finish(self) -> None:
        self.done = True
        if self._plan is None or self._finished:
            return
        self._finished = True
        usage = self._reader.finish() if self._reader is not None else None
        if self._outcome is Outcome.OK and self._reader is not None:
            if self._reader.error:  # the upstream's error event, as the gateway counts it
                self._outcome = Outcome.SERVER_ERROR
            elif self._reader.broken():  # neither [DONE] nor a finish_reason: cut mid-way
                self._outcome = Outcome.BROKEN
        self.decision.finished(self._plan.handle, usage, self._outcome)


_UNROUTABLE = Refusal(
    500,
    "epp_misconfigured",
    "STREAMED request bodies need send_body_without_waiting_for_header_response",
)
# a request message out of Envoy's order (a body before authenticated headers, headers twice)
_OUT_OF_ORDER = Refusal(
    400, "out_of_order", "ext_proc messages out of order: request headers come once, first"
)


def _outcome_of(status: str) -> Outcome:
    """How a response status counts for the endpoint that sent it."""
    if status.startswith("2"):
        return Outcome.OK
    if status == "429":
        return Outcome.THROTTLED
    if status.startswith("4"):
        return Outcome.CLIENT_ERROR
    return Outcome.SERVER_ERROR


def _status_and_type(headers: HeaderMap) -> tuple[str, str]:
    """A response's ``:status`` and ``content-type`` (repeats joined, as ``header_dict``
    does), without reading its other headers."""
    found: dict[str, str] = {}
    for header in headers.headers:
        key = header.key.lower()
        if key in _RESPONSE_HEADERS_READ:
            raw = header.raw_value
            value = raw.decode("utf-8", "replace") if raw else header.value
            found[key] = f"{found[key]},{value}" if key in found else value
    return found.get(":status", ""), found.get("content-type", "")


_RESPONSE_HEADERS_READ = frozenset((":status", "content-type"))


def _served_endpoint(message: ProcessingRequest) -> str | None:
    """The endpoint Envoy reports as having served (``envoy.lb`` metadata), if any."""
    namespaces = message.metadata_context.filter_metadata
    if wire.DESTINATION_NAMESPACE not in namespaces:
        return None
    fields = namespaces[wire.DESTINATION_NAMESPACE].fields
    if wire.SERVED_KEY not in fields:
        return None
    served: str = fields[wire.SERVED_KEY].string_value
    return served or None
