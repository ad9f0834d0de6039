"""``SimServers`` inside a running loop: hundreds of concurrent streams, the async client."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai

from tests.worlds import SIM_LAB
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.prompt import count_tokens
from trafficmgr.simserver import SimServers, fleet_specs

STREAMS = 300
TOKENS = 40


async def one_stream(session: aiohttp.ClientSession, url: str, i: int) -> int:
    body = {"model": "m-small", "prompt": f"stream {i} says hello", "max_tokens": TOKENS,
            "ignore_eos": True, "stream": True}  # fmt: skip
    events = 0
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: {"):
                assert "error" not in json.loads(line[6:])
                events += 1
    return events


async def many_streams() -> tuple[list[int], int]:
    specs = fleet_specs(load_fleet_text(SIM_LAB), base_port=0)
    async with SimServers(specs, time_scale=20.0) as servers:
        url = servers.url("fast-1")  # one H100: 64 slots, so most streams queue
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            counts = await asyncio.gather(*(one_stream(session, url, i) for i in range(STREAMS)))
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        reply = await client.chat.completions.create(
            model="m-small",
            messages=[{"role": "user", "content": "one two three"}],
            max_tokens=9,
            extra_body={"ignore_eos": True},
        )
        await client.close()
        assert count_tokens(reply.choices[0].message.content or "") == 9
        return list(counts), len(servers.live("fast-1").flights)


def test_hundreds_of_concurrent_streams_complete() -> None:
    counts, left = asyncio.run(many_streams())
    assert counts == [TOKENS] * STREAMS
    assert left == 0
