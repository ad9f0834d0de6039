"""Envoy walks the EPP's fallback list: dead or overloaded endpoints are skipped unseen."""

from __future__ import annotations

import openai
import pytest

from tests.epp.conftest import TOKEN, Bench
from tests.epp.http import post
from trafficmgr.epp.decision import Outcome

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_killed_upstream_is_skipped_without_client_visible_error(bench: Bench) -> None:
    bench.kill("u1")
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
    served = []
    for _ in range(8):
        raw = api.chat.completions.with_raw_response.create(**CHAT)  # type: ignore[call-overload]
        served.append(raw.headers["x-upstream"])
        assert raw.headers["x-trafficmgr-endpoint"] == served[-1]
    assert "u1" not in served
    bench.wait_idle()
    dead = bench.upstream("u1").address
    first_on_dead = [r for r in bench.decision.records if r.plan.targets[0].address == dead]
    assert first_on_dead, "round robin put the dead endpoint first at least once"
    for record in first_on_dead:
        assert record.failed == [(dead, Outcome.SERVER_ERROR)]
        assert record.served == [record.plan.targets[1].address]  # the retry's endpoint
        assert record.finished[0][0] == Outcome.OK


def test_streamed_request_falls_back_too(bench: Bench) -> None:
    bench.kill("u0")
    bench.kill("u1")
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
    for _ in range(4):
        stream = api.chat.completions.create(**CHAT, stream=True)  # type: ignore[call-overload]
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text.split()[0] in {"u2", "u3"}


def test_upstream_503_is_retried_on_the_next_endpoint(bench: Bench) -> None:
    bench.upstream("u0").fail_with = 503
    for _ in range(4):
        reply = post(f"{bench.base_url}/v1/chat/completions", CHAT, AUTH)
        assert reply.status == 200
        assert reply.headers["x-upstream"] != "u0"


def test_upstream_500_is_not_retried(bench: Bench) -> None:
    """A 500 may come after the model ran: retrying could bill or act twice."""
    bench.upstream("u0").fail_with = 500
    statuses = [post(f"{bench.base_url}/v1/chat/completions", CHAT, AUTH).status for _ in range(4)]
    assert statuses.count(500) == 1
    bench.wait_idle()
    failed = [r for r in bench.decision.records if r.finished[0][0] == Outcome.SERVER_ERROR]
    assert len(failed) == 1 and failed[0].current == bench.upstream("u0").address


def test_retries_stop_at_the_end_of_the_list(bench: Bench) -> None:
    """With every listed endpoint down, Envoy answers 503: it never falls back to an
    endpoint the core did not list (which could sit in a region residency forbids)."""
    bench.kill("u0")
    bench.kill("u1")
    headers = {**AUTH, "x-gateway-destination-endpoint-subset": "u0,u1"}
    for _ in range(3):
        reply = post(f"{bench.base_url}/v1/chat/completions", CHAT, headers)
        assert reply.status == 503
        error = reply.json()["error"]
        assert error["type"] == "server_error" and error["message"]
    assert bench.upstream("u2").served == bench.upstream("u3").served == 0
    bench.wait_idle()
    for record in bench.decision.records:
        assert [t.name for t in record.plan.targets] in (["u0", "u1"], ["u1", "u0"])
        assert record.finished[0][0] == Outcome.SERVER_ERROR
