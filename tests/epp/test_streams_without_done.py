"""The endpoint picker judges a stream's end as the gateway does: a body that ends cleanly
after a ``finish_reason`` (and usage) chunk without ``data: [DONE]`` is complete (Hugging Face
``transformers serve`` streams so): not counted toward ejection, its length learned. A body
that ends with neither is broken. The exchange runs in-process over the real core."""

from __future__ import annotations

import asyncio
import json

from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
)

from tests.gateway.world import TOKEN, US_IP, make_core, world_fleet
from trafficmgr.epp.exchange import Exchange, ExchangeSettings
from trafficmgr.requestpath.core import RequestPath

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}
TOKEN_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"w"}}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":11}}\n\n'


def headers(values: dict[str, str], end: bool = False) -> HttpHeaders:
    items = [HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    return HttpHeaders(headers=HeaderMap(headers=items), end_of_stream=end)


def exchange_with(core: RequestPath, chunks: list[bytes]) -> None:
    """Route one streamed chat through the picker and answer it with ``chunks``."""
    exchange = Exchange(core, ExchangeSettings())

    async def run() -> None:
        request = {
            ":method": "POST",
            ":path": "/v1/chat/completions",
            "authorization": f"Bearer {TOKEN}",
            "x-forwarded-for": US_IP,
        }
        await exchange.handle(ProcessingRequest(request_headers=headers(request)))
        body = HttpBody(body=json.dumps(CHAT).encode(), end_of_stream=True)
        (routed,) = await exchange.handle(ProcessingRequest(request_body=body))
        assert routed.HasField("request_body"), routed  # a destination, not a refusal
        response = {":status": "200", "content-type": "text/event-stream"}
        await exchange.handle(ProcessingRequest(response_headers=headers(response)))
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            body = HttpBody(body=chunk, end_of_stream=last)
            await exchange.handle(ProcessingRequest(response_body=body))
        exchange.close()

    asyncio.run(run())


def test_a_stream_ending_after_its_finish_reason_is_complete() -> None:
    core, source = make_core(world_fleet(), region="us-east", consecutive_failures=1)
    core.maintain()
    core.drain("use-2")
    for _ in range(3):
        exchange_with(core, [TOKEN_EVENT * 3, FINISH, USAGE])  # no [DONE]
    assert core.outlier.ejections_total == 0
    assert not any(core.in_flight().values())
    core.maintain()
    assert [c.output_tokens for c in source.reported if c.endpoint == "use-1"] == [11, 11, 11]


def test_a_stream_ending_with_neither_is_broken() -> None:
    core, source = make_core(world_fleet(), region="us-east", consecutive_failures=1)
    core.maintain()
    core.drain("use-2")
    exchange_with(core, [TOKEN_EVENT * 3, TOKEN_EVENT])
    assert core.outlier.ejections_total == 1  # counted against the endpoint
    core.maintain()
    assert [c for c in source.reported if c.endpoint == "use-1"] == []
