"""Responses read whole share one bound per worker: an endpoint sending endless bodies to many
requests at once cannot make the worker hold more than ``max_buffered_bytes`` for them."""

from __future__ import annotations

import asyncio

import pytest

from tests.gateway.raw_endpoint import RawEndpoint
from trafficmgr.gateway.upstream import UpstreamBroken, UpstreamPool

ENDLESS_BODY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", b" " * 65536)
BUDGET = 2 * 1024 * 1024
EACH = 64 * 1024 * 1024  # far above the budget: the budget is what stops them


async def _read_all(concurrent: int) -> tuple[list[BaseException | bytes], int, UpstreamPool]:
    endpoint = RawEndpoint(*ENDLESS_BODY)
    await endpoint.start()
    pool = UpstreamPool(1.0, 30.0, 8, max_body_bytes=EACH, max_buffered_bytes=BUDGET)
    peak = 0

    async def one() -> bytes:
        response = await pool.post(f"127.0.0.1:{endpoint.port}", "/v1/x", b"{}", {})
        await response.start()
        return await response.read()

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, pool.buffered)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(one() for _ in range(concurrent)), return_exceptions=True), 20
        )
    finally:
        watcher.cancel()
        await endpoint.stop()
    return results, peak, pool


def test_endless_bodies_to_many_requests_stay_within_the_worker_budget() -> None:
    results, peak, pool = asyncio.run(_read_all(8))
    assert all(isinstance(r, UpstreamBroken) for r in results), results
    assert any("hold more than" in str(r) for r in results)
    # one read's worth past the budget at most per reader, never each reader's own cap
    assert peak <= BUDGET + 8 * 256 * 1024
    assert pool.buffered == 0  # every reservation was given back
    assert pool.idle_connections == 0  # none of the cut connections was pooled


@pytest.mark.parametrize("size", [1000, 300_000])
def test_a_body_within_the_budget_is_read_whole_and_released(size: int) -> None:
    body = b"x" * size
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size

    async def run() -> tuple[bytes, int]:
        endpoint = RawEndpoint(head + body)
        await endpoint.start()
        pool = UpstreamPool(1.0, 30.0, 8, max_buffered_bytes=BUDGET)
        try:
            response = await pool.post(f"127.0.0.1:{endpoint.port}", "/v1/x", b"{}", {})
            await response.start()
            return await response.read(), pool.buffered
        finally:
            await endpoint.stop()

    data, left = asyncio.run(run())
    assert data == body
    assert left == 0
