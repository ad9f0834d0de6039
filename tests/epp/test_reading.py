"""Reading requests and responses: the pure functions under the EPP's stream logic."""

from __future__ import annotations

import argparse
import json

import pytest
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue, Metadata
from google.protobuf.struct_pb2 import Struct

from trafficmgr.epp.cli import add_arguments, settings_from_args
from trafficmgr.epp.decision import Refusal, Usage
from trafficmgr.epp.exchange import _status_and_type
from trafficmgr.epp.request import (
    client_address,
    header_dict,
    parse_body,
    request_info,
    rewrite_model,
    subset_hint,
)
from trafficmgr.epp.usage import ResponseReader
from trafficmgr.epp.wire import error_body, immediate_response
from trafficmgr.requestpath import bearer_token
from trafficmgr.requestpath.reading import networks, read_request


def test_headers_lowercased_and_repeats_joined() -> None:
    headers = HeaderMap(
        headers=[
            HeaderValue(key="X-Forwarded-For", raw_value=b"1.1.1.1"),
            HeaderValue(key="x-forwarded-for", value="2.2.2.2"),
        ]
    )
    assert header_dict(headers) == {"x-forwarded-for": "1.1.1.1,2.2.2.2"}


def test_response_status_and_type_read_as_header_dict_reads_them() -> None:
    headers = HeaderMap(
        headers=[
            HeaderValue(key=":status", raw_value=b"200"),
            HeaderValue(key="Content-Type", value="text/event-stream"),
            HeaderValue(key="content-type", raw_value=b"charset=utf-8"),
            HeaderValue(key="x-other", raw_value=b"\xff"),
        ]
    )
    full = header_dict(headers)
    assert _status_and_type(headers) == (full[":status"], full["content-type"])
    assert _status_and_type(HeaderMap()) == ("", "")


def test_bearer_token() -> None:
    assert bearer_token({"authorization": "Bearer  abc "}) == "abc"
    assert bearer_token({"authorization": "Basic abc"}) is None
    assert bearer_token({"authorization": "Bearer"}) is None
    assert bearer_token({}) is None


def test_client_address_skips_trusted_proxies() -> None:
    headers = {"x-forwarded-for": "6.6.6.6, 81.2.69.142, 10.0.0.1"}
    assert client_address(headers) == "10.0.0.1"  # Envoy's peer: no proxy trusted
    assert client_address(headers, networks(["10.0.0.0/8"])) == "81.2.69.142"
    everyone = networks(["0.0.0.0/0"])
    assert client_address(headers, everyone) == "6.6.6.6"
    assert client_address({}) is None


def test_subset_hint_as_list_or_string() -> None:
    metadata = Metadata()
    assert subset_hint(metadata) is None
    hint = Struct()
    hint.update({"x-gateway-destination-endpoint-subset": ["10.0.0.1:80", "10.0.0.2:80"]})
    metadata.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
    assert subset_hint(metadata) == frozenset({"10.0.0.1:80", "10.0.0.2:80"})
    hint.update({"x-gateway-destination-endpoint-subset": "a:1, b:2"})
    metadata.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
    assert subset_hint(metadata) == frozenset({"a:1", "b:2"})
    hint.update({"x-gateway-destination-endpoint-subset": []})
    metadata.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
    assert subset_hint(metadata) == frozenset()  # empty: nothing eligible (503)


def test_bodies() -> None:
    assert isinstance(parse_body(b"\xff"), Refusal)
    assert isinstance(parse_body(b'"text"'), Refusal)
    assert parse_body(b'{"model": "m"}') == read_request(b'{"model": "m"}', None)
    chat = {
        "model": "m",
        "messages": [{"content": "a b"}, {"content": [{"type": "text", "text": "c"}]}],
    }
    read = parse_body(json.dumps(chat).encode(), "/v1/chat/completions")
    assert not isinstance(read, Refusal) and read.prompt == "a b\nc"
    read = parse_body(b'{"model": "m", "prompt": ["x", "y"]}', "/v1/completions")
    assert not isinstance(read, Refusal) and read.prompt == "x\ny"
    assert json.loads(rewrite_model(b'{"model": "a", "n": 1}', "b")) == {"model": "b", "n": 1}


def test_request_info_fields() -> None:
    headers = {"x-session-id": "s", "x-trafficmgr-priority": "batch", ":path": "/v1/x"}
    body = parse_body(b'{"model": "m", "user": "u", "max_tokens": 9, "prompt": "p q"}')
    assert not isinstance(body, Refusal)
    info = request_info(headers, body, None, None)
    assert (info.model, info.session_id, info.priority, info.max_output_tokens) == (
        "m",
        "s",
        "batch",
        9,
    )
    refused = parse_body(b'{"model": 3}')
    assert isinstance(refused, Refusal) and (refused.code, refused.param) == (
        "invalid_value",
        "model",
    )


def test_streamed_usage_across_split_chunks() -> None:
    def sse(data: object) -> bytes:
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    body = (
        sse({"choices": [{"delta": {"content": "hel"}}]})
        + sse({"choices": [{"delta": {"content": "lo world"}}]})
        + sse({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}})
        + b"data: [DONE]\n\n"
    )
    reader = ResponseReader(streaming=True)
    seen = sum(reader.feed(body[i : i + 7]) for i in range(0, len(body), 7))
    assert seen == 3  # one per content event at least, its words when more: 1 + 2
    assert reader.finish() == Usage(4, 2)


def test_json_usage_read_at_the_end() -> None:
    reader = ResponseReader(streaming=False)
    body = json.dumps({"usage": {"prompt_tokens": 3, "completion_tokens": 5}}).encode()
    assert reader.feed(body[:10]) == 0 and reader.feed(body[10:]) == 0
    assert reader.finish() == Usage(3, 5)
    assert ResponseReader(streaming=False).finish() is None


def test_immediate_response_shape() -> None:
    reply = immediate_response(429, "saturated", "busy", retry_after=0.2)
    assert reply.immediate_response.status.code == 429
    headers = {
        h.header.key: h.header.raw_value for h in reply.immediate_response.headers.set_headers
    }
    assert headers["retry-after"] == b"1"
    assert json.loads(error_body(404, "model_not_found", "x")) == {
        "error": {"message": "x", "type": "invalid_request_error", "code": "model_not_found"}
    }


def test_trusted_proxies_are_networks_and_hops_are_gone() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--trusted-proxy", "10.0.0.0/8", "--trusted-proxy", "127.0.0.1"])
    assert settings_from_args(args).trusted_proxies == networks(["10.0.0.0/8", "127.0.0.1"])
    with pytest.raises(ValueError, match=r"--trusted-hops is gone.*--trusted-proxy"):
        settings_from_args(parser.parse_args(["--trusted-hops", "1"]))
    with pytest.raises(ValueError, match="--trusted-proxy: 'nope'"):
        settings_from_args(parser.parse_args(["--trusted-proxy", "nope"]))
