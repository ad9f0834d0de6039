"""A client that disconnects mid-stream cancels the upstream generation and leaks nothing;
many concurrent streams are relayed at once."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.gateway.world import TOKEN, US_IP, GatewayThread, ledger_drained
from trafficmgr.simserver import SimServerThread

AUTH = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": US_IP}


def long_stream(max_tokens: int = 100000) -> dict[str, object]:
    return {
        "model": "m1",
        "messages": [{"role": "user", "content": "tell me everything"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }


def flights(sim: SimServerThread) -> int:
    return sum(len(sim.servers.live(name).flights) for name in sim.servers.addresses())


def test_client_disconnect_cancels_the_upstream(
    gateway: GatewayThread, sim: SimServerThread
) -> None:
    async def read_a_little() -> int:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(
                gateway.base_url + "/chat/completions", json=long_stream(), headers=AUTH
            )
            got = 0
            async for _ in resp.content.iter_any():
                got += 1
                if got >= 3:
                    break
            resp.close()  # hang up mid-stream
            return got

    assert asyncio.run(read_a_little()) == 3
    deadline = time.monotonic() + 5
    while (gateway.core.ledger.total or flights(sim)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ledger_drained(gateway.core) == 0
    assert flights(sim) == 0  # the simulated server aborted the generation


def test_two_hundred_concurrent_streams(gateway: GatewayThread) -> None:
    async def one(session: aiohttp.ClientSession) -> int:
        async with session.post(
            gateway.base_url + "/chat/completions", json=long_stream(20), headers=AUTH
        ) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.read()
            return body.count(b"data: ")

    async def all_of_them() -> list[int]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            return await asyncio.gather(*(one(session) for _ in range(200)))

    counts = asyncio.run(all_of_them())
    assert all(c >= 21 for c in counts)  # 20 tokens (+ role chunk) and [DONE]
    assert ledger_drained(gateway.core) == 0
