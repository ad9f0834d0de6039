"""TTFT and decode pace follow the endpoint's GPU profile, scaled by ``--time-scale``.

Tokens can be late on a loaded machine but never early, so the lower bounds are tight (the
model's time less a little) and the upper bounds generous.
"""

from __future__ import annotations

import threading
import time

import openai

from tests.simserver.lab import StartServers
from trafficmgr.routing.types import Endpoint, GpuProfile
from trafficmgr.sim.server import EndpointServer, Job

SCALE = 2.0
SLACK_S = 1.5  # how late a token may come on a loaded 2-core machine


def stream_times(base_url: str, words: int, tokens: int, tag: str = "w") -> list[float]:
    """Send one chat stream; return when each content token arrived, from the send."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)
    content = " ".join(f"{tag}{i}" for i in range(words))
    start = time.monotonic()
    stream = client.chat.completions.create(
        model="m-small",
        messages=[{"role": "user", "content": content}],
        max_tokens=tokens,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    arrivals = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - start)
    assert len(arrivals) == tokens
    return arrivals


def test_single_stream_ttft_and_pace(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=SCALE)
    arrivals = stream_times(servers.url("slow-1"), words=500, tokens=101)
    # T1: 500 prompt tokens at 1000/s, then 100 tokens at 100/s (one stream alone).
    ttft, decode = 0.5 / SCALE, 1.0 / SCALE
    assert 0.95 * ttft <= arrivals[0] <= ttft + SLACK_S
    for k, at in enumerate(arrivals):  # token k is never earlier than the model makes it
        assert at - arrivals[0] >= 0.95 * k * 0.01 / SCALE - 0.01
    assert 0.95 * decode <= arrivals[-1] - arrivals[0] <= decode + SLACK_S


def test_concurrent_streams_finish_when_the_simulator_says(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=SCALE)
    n, words, tokens = 4, 100, 41
    # What the DES computes for four requests arriving together on one T1.
    model = EndpointServer(
        0, Endpoint("x", "r", "", "T1", 1, ("m",)), GpuProfile("T1", 1000, 100, 8)
    )
    for rid in range(n):
        model.submit(Job(rid, words, tokens, float(tokens)), 0.0)
    ends: list[float] = []
    while model.next_event() < float("inf"):
        at = model.next_event()
        ends.extend(at for _ in model.step(at)[1])
    results: list[list[float]] = []

    def one(tag: str) -> None:  # distinct prompts: no prefix-cache hits between them
        results.append(stream_times(servers.url("slow-1"), words, tokens, tag))

    threads = [threading.Thread(target=one, args=(f"s{i}-",)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    got = sorted(r[-1] for r in results)
    assert len(got) == n
    for measured, expected in zip(got, sorted(ends), strict=True):
        assert 0.95 * expected / SCALE - 0.05 <= measured <= expected / SCALE + SLACK_S
    assert sorted(ends)[-1] > 2.0 * (words / 1000 + tokens / 100)  # they did share the GPU
