"""Junk and repeated wrong tokens through the gateway: refused before they cost anything,
limited per client address (X-Forwarded-For from loopback, a trusted proxy here)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2 as httpx
import pytest

from tests.gateway.world import TOKEN, GatewayThread

GOOD = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def http(gateway: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.origin, timeout=20) as c:
        yield c


def post(http: httpx.Client, token: str, client: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-For": client}
    return http.post("/v1/chat/completions", json=GOOD, headers=headers)


def test_long_junk_tokens_are_refused_without_a_lookup(
    http: httpx.Client, gateway: GatewayThread
) -> None:
    for i in range(50):  # under the head cap (16 KiB), so the token itself is what is judged
        r = post(http, "x" * 15_000 + str(i), f"192.0.2.{i + 1}")
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "invalid_api_key"
    huge = post(http, "x" * 60_000, "192.0.2.99")  # past the head cap: refused before parsing
    assert huge.status_code == 431, huge.text
    assert gateway.core.tokens.lookups == 0
    assert gateway.core.tokens.held() == 0
    assert post(http, TOKEN, "192.0.2.1").status_code == 200


def test_one_address_failing_again_and_again_gets_429_another_still_401(
    http: httpx.Client, gateway: GatewayThread
) -> None:
    burst = gateway.core.tokens.limits.failures_burst
    codes = [post(http, "sk-wrong-client", "203.0.113.7").status_code for _ in range(burst + 3)]
    assert codes == [401] * burst + [429] * 3
    limited = post(http, "sk-wrong-client", "203.0.113.7")
    assert limited.json()["error"]["code"] == "too_many_failures"
    assert int(limited.headers["Retry-After"]) >= 1
    assert post(http, "sk-wrong-client", "203.0.113.8").status_code == 401
    assert post(http, TOKEN, "203.0.113.8").status_code == 200
