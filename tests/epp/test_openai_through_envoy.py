"""The real OpenAI client through Envoy and the EPP to the upstreams, streamed and not."""

from __future__ import annotations

import openai
import pytest

from tests.epp.conftest import TOKEN, Bench
from trafficmgr.epp.decision import Outcome, Usage

pytestmark = pytest.mark.integration


def client(bench: Bench, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0, timeout=10, **kwargs
    )


def test_chat_completion_routes_and_reports_usage(bench: Bench) -> None:
    raw = client(bench).chat.completions.with_raw_response.create(
        model="m1", messages=[{"role": "user", "content": "hello there"}], max_tokens=5
    )
    completion = raw.parse()
    served_by = raw.headers["x-upstream"]
    assert completion.choices[0].message.content.split()[0] == served_by
    assert raw.headers["x-trafficmgr-endpoint"] == served_by
    assert raw.headers["x-trafficmgr-region"] == "eu-west"
    assert raw.headers["x-trafficmgr-reason"] == "round_robin"
    assert float(raw.headers["x-trafficmgr-overhead-ms"]) >= 0
    (record,) = bench.decision.records
    assert record.request.model == "m1"
    assert record.request.prompt == "hello there"
    assert record.request.max_output_tokens == 5
    assert record.request.identity is not None and record.request.identity.tenant == "acme"
    assert record.current == bench.upstream(served_by).address and record.served == []
    bench.wait_idle()
    assert record.finished == [(Outcome.OK, Usage(completion.usage.prompt_tokens, 5))]


def test_streamed_chat_counts_tokens_and_reads_usage_chunk(bench: Bench) -> None:
    stream = client(bench).chat.completions.create(
        model="m1",
        messages=[{"role": "user", "content": "count"}],
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 7
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    bench.wait_idle()
    (record,) = bench.decision.records
    assert record.tokens == 7
    assert record.finished[0][0] == Outcome.OK
    assert record.finished[0][1] is not None and record.finished[0][1].completion_tokens == 7


def test_legacy_completions_streamed(bench: Bench) -> None:
    stream = client(bench).completions.create(
        model="m2", prompt="one two three", max_tokens=4, stream=True
    )
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text.split()[0] == "u2"  # only u2 serves m2
    bench.wait_idle()
    (record,) = bench.decision.records
    assert record.request.prompt == "one two three"
    assert record.tokens == 4
    assert record.finished == [(Outcome.OK, None)]  # no include_usage: nothing reported


def test_requests_spread_round_robin(bench: Bench) -> None:
    seen = set()
    for _ in range(4):
        raw = client(bench).chat.completions.with_raw_response.create(
            model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )
        seen.add(raw.headers["x-upstream"])
    assert seen == {"u0", "u1", "u2", "u3"}


def test_request_headers_reach_the_core(bench: Bench) -> None:
    client(bench).chat.completions.create(
        model="m1",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1,
        user="body-user",
        extra_headers={
            "x-trafficmgr-priority": "batch",
            "x-trafficmgr-strategy": "least_loaded",
            "x-forwarded-for": "81.2.69.142",
        },
    )
    client(bench).chat.completions.create(
        model="m1",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1,
        user="body-user",
        extra_headers={"x-session-id": "s-42"},
    )
    first, second = bench.decision.requests
    assert (first.priority, first.strategy) == ("batch", "least_loaded")
    assert first.session_id == "body-user"
    # Envoy appends the peer it saw (for a loopback peer, its own address): with no trusted
    # proxy in front, that is the client, not what the client wrote in x-forwarded-for
    assert first.client_ip and first.client_ip != "81.2.69.142"
    assert second.session_id == "s-42"


def test_model_fallback_rewrites_the_body_in_every_body_mode(bench: Bench) -> None:
    """The core planned another model: the upstream gets a body naming it, whole (its
    content-length rewritten with it), however the body went through the EPP."""
    padding = "word " * 30_000  # a body of several chunks, for the streamed modes
    completion = client(bench).chat.completions.create(
        model="m0", messages=[{"role": "user", "content": padding}], max_tokens=2
    )
    assert completion.model == "m2"  # the upstream answers with the model it was asked
    assert completion.choices[0].message.content.split()[0] == "u2"  # only u2 serves m2
    (record,) = bench.decision.records
    assert record.request.model == "m0" and record.plan.model == "m2"
    assert len(record.request.prompt) == len(padding)
