"""The real ``openai`` client against the gateway: answers, streams, usage, headers, models."""

from __future__ import annotations

import openai

from tests.gateway.world import US_IP, GatewayThread, ledger_drained

MESSAGES = [{"role": "user", "content": "say something about traffic"}]


def test_chat_completion_with_routing_headers(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="m1",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=7,
        extra_body={"ignore_eos": True},
        extra_headers={"x-request-id": "req-123", "X-Forwarded-For": US_IP},
    )
    answer = raw.parse()
    assert answer.usage is not None and answer.usage.completion_tokens == 7
    assert raw.headers["x-request-id"] == "req-123"
    assert raw.headers["x-trafficmgr-region"] == "us-east"
    assert raw.headers["x-trafficmgr-endpoint"] in {"use-1", "use-2"}
    assert "ai_aware" in raw.headers["x-trafficmgr-reason"]
    assert 0 <= float(raw.headers["x-trafficmgr-overhead-ms"]) < 1000
    assert ledger_drained(gateway.core) == 0


def test_stream_passes_every_chunk_and_the_usage(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    stream = client.chat.completions.create(
        model="m1",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 12
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    assert ledger_drained(gateway.core) == 0


def test_completions_endpoint_streams_too(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="m2",
        prompt="one two three",
        max_tokens=5,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert len("".join(c.choices[0].text for c in stream).split()) == 5


def test_models_lists_the_fleets_models(client: openai.OpenAI) -> None:
    assert sorted(m.id for m in client.models.list()) == ["m1", "m2"]


def test_stream_counted_without_usage_chunk_is_reported(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    stream = client.chat.completions.create(
        model="m1",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=9,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert sum(1 for c in stream if c.choices and c.choices[0].delta.content) == 9
    gateway.core.maintain()
    reported = list(gateway.core.source.reported)  # type: ignore[attr-defined]
    assert reported and reported[-1].output_tokens == 9
