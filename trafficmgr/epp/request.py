"""Read an inference request out of ext_proc messages: headers, body, subset hint.

Pure functions over protobuf values, so each rule (which header wins, how the client
address is found, what a bad body is answered with) is testable without a stream.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envoy.config.core.v3.base_pb2 import HeaderMap, Metadata

from trafficmgr.epp.decision import ClientIdentity, Refusal, RequestInfo
from trafficmgr.epp.wire import SUBSET_KEY, SUBSET_NAMESPACE
from trafficmgr.routing.prompt import chat_prompt


def header_dict(headers: HeaderMap) -> dict[str, str]:
    """Lower-cased header names to values; repeated headers joined with commas."""
    result: dict[str, str] = {}
    for header in headers.headers:
        value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
        key = header.key.lower()
        result[key] = f"{result[key]},{value}" if key in result else value
    return result


def client_address(headers: Mapping[str, str], trusted_hops: int = 0) -> str | None:
    """The client's address from ``x-forwarded-for``, skipping ``trusted_hops`` proxies.

    Envoy (``use_remote_address``) appends the peer it saw, so with no proxy in front of it
    the last entry is the client; each trusted proxy in front adds one more entry.
    """
    entries = [e.strip() for e in headers.get("x-forwarded-for", "").split(",") if e.strip()]
    if not entries:
        return None
    return entries[max(0, len(entries) - 1 - trusted_hops)]


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


def parse_body(body: bytes) -> dict[str, Any] | Refusal:
    """The JSON object of a request body, or the 400 that answers a bad one."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Refusal(400, "invalid_json", f"request body is not JSON: {exc}")
    if not isinstance(data, dict):
        return Refusal(400, "invalid_json", "request body must be a JSON object")
    return data


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt under the project's token rule: chat messages' text, or ``prompt``."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return chat_prompt(m for m in messages if isinstance(m, Mapping))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return ""


def _max_output(body: Mapping[str, Any]) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def request_info(
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    identity: ClientIdentity | None,
    subset: frozenset[str] | None,
    trusted_hops: int = 0,
) -> RequestInfo | Refusal:
    """Everything the core decides on, or the 400 that a body without a model gets.

    Priority and strategy go to the core as sent: it validates them, for both fronts alike.
    """
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        return Refusal(400, "missing_model", "request body names no model", param="model")
    user = body.get("user")
    return RequestInfo(
        model=model.strip(),
        client_ip=client_address(headers, trusted_hops),
        identity=identity,
        priority=headers.get("x-trafficmgr-priority"),
        strategy=headers.get("x-trafficmgr-strategy"),
        session_id=headers.get("x-session-id") or (user if isinstance(user, str) else None),
        prompt=prompt_text(body),
        max_output_tokens=_max_output(body),
        request_id=headers.get("x-request-id"),
        subset=subset,
    )


def rewrite_model(body: bytes, model: str) -> bytes:
    """The body asking for ``model`` instead (the core fell back down a model chain)."""
    data = json.loads(body)
    data["model"] = model
    return json.dumps(data, separators=(",", ":")).encode()
