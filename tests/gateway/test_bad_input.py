"""Every bad input is a clear OpenAI-shaped error, leaks no accounting, and the gateway
keeps serving."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2 as httpx
import openai
import pytest

from tests.gateway.world import TOKEN, GatewayThread, ledger_drained

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GOOD = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def http(gateway: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.origin, timeout=20) as c:
        yield c


def still_serving(http: httpx.Client, gateway: GatewayThread) -> None:
    assert ledger_drained(gateway.core) == 0
    assert http.post("/v1/chat/completions", json=GOOD, headers=AUTH).status_code == 200


def error_of(response: httpx.Response) -> dict[str, str]:
    error = response.json()["error"]
    assert {"message", "type", "code"} <= set(error)
    assert response.headers["x-request-id"]
    return dict(error)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (b'{"messages": []}', 400, "invalid_value"),
        (b'{"model": "m1", "messages": "hi"}', 400, "invalid_value"),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, None),
        (b'{"model": "m1", "messages": [{"content": "x"}], "max_tokens": 0}', 400, None),
        (b'{"model": "m1", "messages": [{"content": "x"}], "max_tokens": 10000000}', 400, None),
        (b'{"model": "m1", "messages": [{"content": "x"}], "stream": "yes"}', 400, None),
    ],
)
def test_bad_bodies(
    http: httpx.Client, gateway: GatewayThread, body: bytes, status: int, code: str | None
) -> None:
    r = http.post("/v1/chat/completions", content=body, headers=AUTH)
    assert r.status_code == status, r.text
    error = error_of(r)
    if code:
        assert error["code"] == code
    still_serving(http, gateway)


def test_unknown_model_via_openai_client_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(
            model="no-such-model",
            messages=[{"role": "user", "content": "x"}],  # type: ignore[list-item]
        )
    assert caught.value.code == "model_not_found"


def test_ten_megabyte_prompt_is_413(http: httpx.Client, gateway: GatewayThread) -> None:
    prompt = "word " * (2 * 1024 * 1024)
    body = {"model": "m1", "messages": [{"role": "user", "content": prompt}]}
    r = http.post("/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 413
    assert error_of(r)["code"] == "request_too_large"
    still_serving(http, gateway)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}]
)
def test_missing_or_wrong_token_is_401(
    http: httpx.Client, gateway: GatewayThread, headers: dict[str, str]
) -> None:
    r = http.post("/v1/chat/completions", json=GOOD, headers=headers)
    assert r.status_code == 401
    assert error_of(r)["type"] == "authentication_error"
    assert http.get("/v1/models", headers=headers).status_code == 401
    still_serving(http, gateway)


def test_revoked_token_is_refused_once_the_cache_expires(fleet) -> None:  # type: ignore[no-untyped-def]
    from tests.gateway.world import make_core

    core, source = make_core(fleet, auth_ttl_s=0.0)
    with GatewayThread(core) as gw, httpx.Client(base_url=gw.origin, timeout=20) as http:
        assert http.post("/v1/chat/completions", json=GOOD, headers=AUTH).status_code == 200
        source.revoke(TOKEN)
        r = http.post("/v1/chat/completions", json=GOOD, headers=AUTH)
        assert r.status_code == 401 and "revoked" in error_of(r)["message"]


def test_unknown_strategy_header_is_400_naming_it(
    http: httpx.Client, gateway: GatewayThread
) -> None:
    r = http.post(
        "/v1/chat/completions",
        json=GOOD,
        headers={**AUTH, "x-trafficmgr-strategy": "fastest"},
    )
    assert r.status_code == 400
    assert "x-trafficmgr-strategy" in error_of(r)["message"]
    still_serving(http, gateway)


@pytest.mark.parametrize("strategy", ["round_robin", "least_outstanding_work", "weighted"])
def test_known_strategy_header_is_used(http: httpx.Client, strategy: str) -> None:
    r = http.post(
        "/v1/chat/completions", json=GOOD, headers={**AUTH, "x-trafficmgr-strategy": strategy}
    )
    assert r.status_code == 200 and strategy in r.headers["x-trafficmgr-reason"]


def test_health_and_metrics(http: httpx.Client) -> None:
    assert http.post("/v1/chat/completions", json=GOOD, headers=AUTH).status_code == 200
    http.post("/v1/chat/completions", json=GOOD)  # one 401
    assert http.get("/healthz").json()["status"] == "ok"
    text = http.get("/metrics").text
    for name in (
        "trafficmgr_gateway_requests_total",
        "trafficmgr_gateway_ttft_seconds_bucket",
        "trafficmgr_gateway_request_seconds_bucket",
        "trafficmgr_gateway_in_flight",
        "trafficmgr_gateway_queue_depth",
        "trafficmgr_gateway_ejections_total",
        'trafficmgr_gateway_rejects_total{reason="unauthorized"}',
        "trafficmgr_gateway_routing_seconds_bucket",
    ):
        assert name in text, name
