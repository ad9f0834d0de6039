"""Requests the EPP answers itself, in OpenAI's error shape, without leaking accounting."""

from __future__ import annotations

import json

import openai
import pytest

from tests.epp.conftest import MAX_BODY, TOKEN, Bench
from tests.epp.http import Reply, get, post

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def chat(bench: Bench, body: bytes | dict[str, object], **headers: str) -> Reply:
    return post(f"{bench.base_url}/v1/chat/completions", body, {**AUTH, **headers})


def assert_error(reply: Reply, status: int, code: str, error_type: str) -> None:
    assert reply.status == status, reply.body
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()["error"]
    assert (error["code"], error["type"]) == (code, error_type)
    assert error["message"]


def test_missing_token_is_401(bench: Bench) -> None:
    reply = post(
        f"{bench.base_url}/v1/chat/completions", CHAT, {"content-type": "application/json"}
    )
    assert_error(reply, 401, "invalid_api_key", "authentication_error")


def test_unknown_token_is_401_for_the_openai_client(bench: Bench) -> None:
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        api.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    assert caught.value.code == "invalid_api_key"


def test_body_not_json_is_400(bench: Bench) -> None:
    assert_error(chat(bench, b"{not json"), 400, "invalid_json", "invalid_request_error")
    assert_error(chat(bench, b"[1, 2]"), 400, "invalid_json", "invalid_request_error")


def test_body_without_model_is_400(bench: Bench) -> None:
    reply = chat(bench, {"messages": [{"role": "user", "content": "hi"}]})
    assert_error(reply, 400, "invalid_value", "invalid_request_error")  # as the gateway


def test_model_nobody_serves_is_404(bench: Bench) -> None:
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        api.chat.completions.create(**{**CHAT, "model": "no-such-model"})  # type: ignore[call-overload]
    assert caught.value.code == "model_not_found"
    assert caught.value.response.headers["x-trafficmgr-reason"] == "model_not_found"


def test_bad_priority_is_refused_by_the_core(bench: Bench) -> None:
    reply = chat(bench, CHAT, **{"x-trafficmgr-priority": "urgent"})
    assert_error(reply, 400, "invalid_priority", "invalid_request_error")


def test_body_over_the_epp_limit_is_413(bench: Bench) -> None:
    body = json.dumps({**CHAT, "padding": "x" * (MAX_BODY + 10)}).encode()
    assert_error(chat(bench, body), 413, "body_too_large", "invalid_request_error")
    assert bench.decision.requests == []


def test_body_over_envoys_buffer_is_413_in_the_same_shape(bench: Bench) -> None:
    body = json.dumps({**CHAT, "padding": "x" * (3 * MAX_BODY)}).encode()
    reply = chat(bench, body)
    assert reply.status == 413
    assert reply.json()["error"]["type"] == "invalid_request_error"


def test_headers_only_request_is_400(bench: Bench) -> None:
    reply = get(f"{bench.base_url}/v1/chat/completions", {"authorization": f"Bearer {TOKEN}"})
    assert_error(reply, 400, "missing_body", "invalid_request_error")


def test_model_listing_needs_a_token(bench: Bench) -> None:
    assert_error(get(f"{bench.base_url}/v1/models"), 401, "invalid_api_key", "authentication_error")


def test_unknown_model_is_404_in_the_listing(bench: Bench) -> None:
    reply = get(f"{bench.base_url}/v1/models/nope", {"authorization": f"Bearer {TOKEN}"})
    assert_error(reply, 404, "model_not_found", "invalid_request_error")


def test_shedding_is_429_with_retry_after(bench: Bench) -> None:
    bench.decision.max_in_flight = 0
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        api.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    assert caught.value.code == "overloaded"
    assert caught.value.response.headers["retry-after"] == "1"


def test_empty_subset_is_503_with_retry_after(bench: Bench) -> None:
    reply = chat(bench, CHAT, **{"x-gateway-destination-endpoint-subset": "10.9.9.9:80"})
    assert_error(reply, 503, "no_endpoint", "server_error")
    assert reply.headers["retry-after"] == "2"


def test_subset_hint_limits_the_endpoints(bench: Bench) -> None:
    for _ in range(3):
        reply = chat(bench, CHAT, **{"x-gateway-destination-endpoint-subset": "u3"})
        assert reply.status == 200 and reply.headers["x-upstream"] == "u3"
    assert all(r.subset == frozenset({"u3"}) for r in bench.decision.requests)
    # the hint is the data plane's, not the upstream's business
    assert all(
        "x-gateway-destination-endpoint-subset" not in h for h in bench.upstream("u3").headers_seen
    )
