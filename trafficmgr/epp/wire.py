"""Names of the endpoint picker protocol and builders of the ext_proc messages it sends.

The names are the Gateway API Inference Extension's (proposal 004): Envoy routes on the
``x-gateway-destination-endpoint`` header and the same key in the ``envoy.lb`` dynamic
metadata, hints a subset under ``envoy.lb.subset_hint``, and reports the endpoint that
served under ``envoy.lb`` / ``x-gateway-destination-endpoint-served``. Everything that
builds a ``ProcessingResponse`` lives here so the stream logic reads as decisions only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

from envoy.config.core.v3.base_pb2 import HeaderValue, HeaderValueOption
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    BodyMutation,
    BodyResponse,
    CommonResponse,
    HeaderMutation,
    HeadersResponse,
    ImmediateResponse,
    ProcessingResponse,
    StreamedBodyResponse,
    TrailersResponse,
)
from envoy.type.v3.http_status_pb2 import HttpStatus
from google.protobuf.struct_pb2 import Struct

DESTINATION_NAMESPACE = "envoy.lb"
DESTINATION_KEY = "x-gateway-destination-endpoint"
SERVED_KEY = "x-gateway-destination-endpoint-served"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"

REGION_HEADER = "x-trafficmgr-region"
ENDPOINT_HEADER = "x-trafficmgr-endpoint"
REASON_HEADER = "x-trafficmgr-reason"
OVERHEAD_HEADER = "x-trafficmgr-overhead-ms"
# Envoy caps the retries at the list's length, so its fallback LB never picks a host the
# core did not choose (see envoy_config); ext_proc may set it once allow_envoy is on.
MAX_RETRIES_HEADER = "x-envoy-max-retries"
# The region cluster the request goes to (Envoy's route reads it; envoy_config makes one
# cluster per region, named by ``cluster_name``, so a fallback stays in the region).
CLUSTER_HEADER = "x-trafficmgr-cluster"
CLUSTER_PREFIX = "endpoints."

# Envoy implementations cap one streamed chunk at 64 KiB; stay under it.
CHUNK_BYTES = 62_000

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}


def header_text(text: str, limit: int = 512) -> str:
    """``text`` fit for a header value: one line, printable, at most ``limit`` characters."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:limit]


def cluster_name(region: str) -> str:
    """The Envoy cluster holding ``region``'s endpoints."""
    return CLUSTER_PREFIX + region


def _request_common(headers: Mapping[str, str] | None) -> CommonResponse:
    """A request reply's mutations; one naming the cluster makes Envoy pick the route again."""
    if not headers:
        return CommonResponse()
    return CommonResponse(
        header_mutation=HeaderMutation(set_headers=header_options(headers)),
        clear_route_cache=CLUSTER_HEADER in headers,
    )


def header_options(headers: Mapping[str, str]) -> list[HeaderValueOption]:
    """Header mutations that overwrite (not append to) each named header."""
    return [
        HeaderValueOption(
            header=HeaderValue(key=key, raw_value=value.encode()),
            append_action=HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
        )
        for key, value in headers.items()
    ]


def destination_metadata(endpoints: Iterable[str]) -> Struct:
    """``envoy.lb`` dynamic metadata carrying the fallback list, best first."""
    metadata = Struct()
    metadata.update({DESTINATION_NAMESPACE: {DESTINATION_KEY: ",".join(endpoints)}})
    return metadata


def request_headers_response(
    headers: Mapping[str, str], metadata: Struct | None = None
) -> ProcessingResponse:
    """Answer a request headers message, setting ``headers`` on the upstream request."""
    if not headers and metadata is None:
        return _CONTINUE_REQUEST_HEADERS
    return ProcessingResponse(
        request_headers=HeadersResponse(response=_request_common(headers)),
        dynamic_metadata=metadata,
    )


def request_body_response(
    headers: Mapping[str, str] | None = None,
    metadata: Struct | None = None,
    body: bytes | None = None,
    clear: bool = False,
) -> ProcessingResponse:
    """Answer a buffered request body (or one streamed chunk): keep it, replace it with
    ``body``, or ``clear`` it.

    Headers may still change here, since a buffered request has not gone upstream yet; a
    new body needs its ``content-length`` set to match, which the caller does.
    """
    if headers is None and metadata is None and body is None and not clear:
        return _CONTINUE_REQUEST_BODY
    common = _request_common(headers)
    if body is not None:
        common.body_mutation.CopyFrom(BodyMutation(body=body))
    elif clear:
        common.body_mutation.CopyFrom(BodyMutation(clear_body=True))
    return ProcessingResponse(request_body=BodyResponse(response=common), dynamic_metadata=metadata)


def streamed_body(body: bytes, end_of_stream: bool, request: bool) -> Iterator[ProcessingResponse]:
    """Give a body back to Envoy in full-duplex mode, in chunks it accepts."""
    chunks = [body[i : i + CHUNK_BYTES] for i in range(0, len(body), CHUNK_BYTES)] or [b""]
    for index, chunk in enumerate(chunks):
        last = end_of_stream and index == len(chunks) - 1
        mutation = BodyMutation(
            streamed_response=StreamedBodyResponse(body=chunk, end_of_stream=last)
        )
        body_response = BodyResponse(response=CommonResponse(body_mutation=mutation))
        if request:
            yield ProcessingResponse(request_body=body_response)
        else:
            yield ProcessingResponse(response_body=body_response)


def response_headers_response(headers: Mapping[str, str]) -> ProcessingResponse:
    """Answer a response headers message, adding ``headers`` to the client's response."""
    common = CommonResponse(header_mutation=HeaderMutation(set_headers=header_options(headers)))
    return ProcessingResponse(response_headers=HeadersResponse(response=common))


def response_body_response() -> ProcessingResponse:
    """Let a streamed (not full-duplex) response body chunk through unchanged."""
    return _CONTINUE_RESPONSE_BODY


# The replies that change nothing, built once (every request sends some; gRPC only reads a
# reply to serialize it, and nothing here changes one after building it)
_CONTINUE_REQUEST_HEADERS = ProcessingResponse(
    request_headers=HeadersResponse(response=CommonResponse())
)
_CONTINUE_REQUEST_BODY = ProcessingResponse(request_body=BodyResponse(response=CommonResponse()))
_CONTINUE_RESPONSE_BODY = ProcessingResponse(response_body=BodyResponse(response=CommonResponse()))


def trailers_response(request: bool) -> ProcessingResponse:
    """Let trailers through unchanged."""
    if request:
        return ProcessingResponse(request_trailers=TrailersResponse())
    return ProcessingResponse(response_trailers=TrailersResponse())


def error_body(status: int, code: str, message: str, error_type: str | None = None) -> bytes:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "code"}}``."""
    kind = error_type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "error")
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def _model(model: str) -> dict[str, object]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "trafficmgr"}


def models_body(models: Iterable[str]) -> bytes:
    """OpenAI's model list (``GET /v1/models``), the gateway's shape."""
    doc = {"object": "list", "data": [_model(m) for m in models]}
    return json.dumps(doc, separators=(",", ":")).encode()


def model_body(model: str) -> bytes:
    """One model of the list (``GET /v1/models/{id}``)."""
    return json.dumps(_model(model), separators=(",", ":")).encode()


def immediate_json(status: int, body: bytes, details: str) -> ProcessingResponse:
    """Answer the client directly with a JSON body (a listing the EPP knows itself)."""
    headers = header_options({"content-type": "application/json"})
    immediate = ImmediateResponse(
        status=HttpStatus(code=status),
        headers=HeaderMutation(set_headers=headers),
        body=body,
        details=f"trafficmgr_epp_{details}",
    )
    return ProcessingResponse(immediate_response=immediate)


def immediate_response(
    status: int,
    code: str,
    message: str,
    retry_after: float | None = None,
    error_type: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> ProcessingResponse:
    """Answer the client directly with an OpenAI-shaped error; Envoy routes nowhere."""
    extra = {"content-type": "application/json", **(headers or {})}
    if retry_after is not None:
        extra["retry-after"] = str(max(1, int(-(-retry_after // 1))))
    immediate = ImmediateResponse(
        status=HttpStatus(code=status),
        headers=HeaderMutation(set_headers=header_options(extra)),
        body=error_body(status, code, message, error_type),
        details=f"trafficmgr_epp_{code}",
    )
    return ProcessingResponse(immediate_response=immediate)
