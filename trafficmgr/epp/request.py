"""Read an inference request out of ext_proc messages: headers, body, subset hint.

Pure functions over protobuf values, so each rule is testable without a stream. The body and
the client address are read by the shared reader (``trafficmgr.requestpath.reading``), the
gateway's, so both fronts refuse, cost and locate a request alike.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from envoy.config.core.v3.base_pb2 import HeaderMap, Metadata

from trafficmgr.epp.decision import ClientIdentity, Refusal, RequestInfo
from trafficmgr.epp.wire import SUBSET_KEY, SUBSET_NAMESPACE
from trafficmgr.requestpath.reading import (
    IpNetwork,
    OpenAIRequest,
    chat_of_path,
    forwarded_client,
    read_request,
    with_model,
)


def header_dict(headers: HeaderMap) -> dict[str, str]:
    """Lower-cased header names to values; repeated headers joined with commas."""
    result: dict[str, str] = {}
    for header in headers.headers:
        value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
        key = header.key.lower()
        result[key] = f"{result[key]},{value}" if key in result else value
    return result


def client_address(headers: Mapping[str, str], trusted: tuple[IpNetwork, ...] = ()) -> str | None:
    """The client's address behind Envoy and the ``trusted`` proxies in front of it.

    The shared rule (``requestpath.reading.client``), the gateway's: Envoy
    (``use_remote_address``) appends the peer it saw to ``x-forwarded-for``, so that last
    entry is the client unless it is a trusted proxy; then the walk goes on leftwards.
    """
    return forwarded_client(headers, trusted)


def subset_hint(metadata: Metadata) -> frozenset[str] | None:
    """The data plane's subset (``envoy.lb.subset_hint``), or None when it set none.

    Envoy filters write either a list or one comma-separated string; both are read.
    """
    if SUBSET_NAMESPACE not in metadata.filter_metadata:
        return None
    fields = metadata.filter_metadata[SUBSET_NAMESPACE].fields
    if SUBSET_KEY not in fields:
        return None
    value = fields[SUBSET_KEY]
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        items = [value.string_value]
    elif kind == "list_value":
        items = [v.string_value for v in value.list_value.values if v.HasField("string_value")]
    else:
        items = []
    return frozenset(e.strip() for item in items for e in item.split(",") if e.strip())


def parse_body(body: bytes, path: str = "") -> OpenAIRequest | Refusal:
    """Read a request body with the shared reader (chat or completions by ``:path``)."""
    return read_request(body, chat_of_path(path))


def request_info(
    headers: Mapping[str, str],
    body: OpenAIRequest,
    identity: ClientIdentity | None,
    subset: frozenset[str] | None,
    trusted: tuple[IpNetwork, ...] = (),
) -> RequestInfo:
    """Everything the core decides on. Priority and strategy go to the core as sent: it
    validates them, for both fronts alike."""
    return RequestInfo(
        model=body.model,
        client_ip=client_address(headers, trusted),
        identity=identity,
        priority=headers.get("x-trafficmgr-priority"),
        strategy=headers.get("x-trafficmgr-strategy"),
        session_id=headers.get("x-session-id") or body.user,
        prompt=body.prompt,
        max_output_tokens=body.max_tokens,
        request_id=headers.get("x-request-id"),
        subset=subset,
    )


def rewrite_model(body: bytes, model: str) -> bytes:
    """The body asking for ``model`` instead (the core fell back down a model chain)."""
    doc = msgspec.json.decode(body)
    return with_model(doc, model)
