"""The real ``openai`` client, streaming and not, chat and completions, against the server."""

from __future__ import annotations

import openai
import pytest

from tests.simserver.lab import StartServers
from trafficmgr.routing.prompt import count_tokens
from trafficmgr.simserver import SimServerThread

PROMPT = "Explain how a global traffic manager picks a region for a request " * 5


def client(servers: SimServerThread, name: str = "slow-1") -> openai.OpenAI:
    return openai.OpenAI(base_url=servers.url(name) + "/v1", api_key="unused", max_retries=0)


def test_models_lists_the_endpoints_models(servers: SimServerThread) -> None:
    ids = sorted(m.id for m in client(servers).models.list())
    assert ids == ["m-big", "m-small"]
    assert [m.id for m in client(servers, "fast-1").models.list()] == ["m-small"]


def test_chat_with_ignore_eos_gives_exactly_max_tokens(servers: SimServerThread) -> None:
    reply = client(servers).chat.completions.create(
        model="m-big",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}],
        max_tokens=37,
        extra_body={"ignore_eos": True},
    )
    text = reply.choices[0].message.content or ""
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 37 == count_tokens(text)
    assert reply.usage.prompt_tokens == count_tokens("Be brief.\n" + PROMPT)
    assert reply.model == "m-big"


def test_chat_stream_with_usage_chunk(servers: SimServerThread) -> None:
    stream = client(servers).chat.completions.create(
        model="m-small",
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=25,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert count_tokens(content) == 25
    token_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(token_chunks) == 25  # one event per token, as vLLM streams
    assert token_chunks[-1].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (count_tokens(PROMPT), 25)
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_plain_and_streamed(servers: SimServerThread) -> None:
    c = client(servers, "fast-1")
    whole = c.completions.create(
        model="m-small", prompt=PROMPT, max_tokens=12, extra_body={"ignore_eos": True}
    )
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    assert count_tokens(whole.choices[0].text) == 12
    streamed = list(
        c.completions.create(
            model="m-small",
            prompt=PROMPT,
            max_tokens=12,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    assert "".join(s.choices[0].text for s in streamed) == whole.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"


def test_without_ignore_eos_the_length_is_seeded_and_capped(servers: SimServerThread) -> None:
    c = client(servers, "fast-1")
    lengths = []
    for _ in range(2):
        reply = c.chat.completions.create(
            model="m-small", messages=[{"role": "user", "content": PROMPT}], max_tokens=5000
        )
        assert reply.usage is not None
        lengths.append(reply.usage.completion_tokens)
        assert reply.choices[0].finish_reason in {"stop", "length"}
    assert lengths[0] == lengths[1]  # same request, same answer length
    capped = c.chat.completions.create(
        model="m-small", messages=[{"role": "user", "content": PROMPT}], max_tokens=3
    )
    assert capped.usage is not None and capped.usage.completion_tokens <= 3


def test_repeated_prompt_hits_the_prefix_cache(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=200.0)
    long_prompt = " ".join(f"w{i}" for i in range(1200))  # two full blocks and a partial one
    c = client(servers, "fast-1")
    cached = []
    for _ in range(2):
        reply = c.completions.create(
            model="m-small", prompt=long_prompt, max_tokens=2, extra_body={"ignore_eos": True}
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
    assert cached == [0, 1200]


def test_unknown_model_raises_not_found(servers: SimServerThread) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(servers, "fast-1").chat.completions.create(
            model="m-big", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
    assert caught.value.code == "model_not_found"
