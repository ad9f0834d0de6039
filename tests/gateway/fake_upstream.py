"""A misbehaving OpenAI upstream for the faults the simulated server does not make.

``behaviour`` per request path suffix is one of: ``garbage`` (200 then bytes that are not
SSE), ``garbage_mid`` (three good events, then garbage), ``cut`` (three good events, then the
connection closes without ``[DONE]``), ``hang`` (headers never come), ``hang_mid`` (three good
events, then silence), ``no_done`` (three good events, a ``finish_reason`` chunk and a usage
chunk, then the body ends cleanly without ``[DONE]``, as ``transformers serve`` streams),
``ok`` (a short good stream). It counts the requests it got and the
streams it saw cancelled.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

EVENT = (
    b'data: {"id":"x","object":"chat.completion.chunk",'
    b'"choices":[{"index":0,"delta":{"content":"w"}}]}\n\n'
)


FINISH = (
    b'data: {"id":"x","object":"chat.completion.chunk",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
)
USAGE = (
    b'data: {"id":"x","object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":2,"completion_tokens":11,"total_tokens":13}}\n\n'
)


class FakeUpstream:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.requests = 0
        self.headers: dict[str, str] = {}
        self.cancelled = 0
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.headers = {k.lower(): v for k, v in request.headers.items()}
        await request.read()
        if self.behaviour == "throttle":
            return web.json_response(
                {"error": {"message": "busy", "type": "rate_limit_error", "code": "busy"}},
                status=429,
                headers={"Retry-After": "7"},
            )
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        try:
            if self.behaviour == "garbage":
                await out.write(b"<html>this is not an event stream</html>\n\n")
                return out
            for _ in range(3):
                await out.write(EVENT)
                await asyncio.sleep(0.01)
            if self.behaviour == "garbage_mid":
                await out.write(b"\x00\x01 garbage\n\n")
            elif self.behaviour == "cut":
                assert request.transport is not None
                request.transport.close()
            elif self.behaviour == "hang_mid":
                await asyncio.sleep(3600)
            elif self.behaviour == "no_done":
                await out.write(FINISH + USAGE)
            else:
                await out.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return out
