"""A minimal OpenAI-shaped inference server for the EPP tests (aiohttp, loopback only).

Answers ``/v1/chat/completions`` and ``/v1/completions``, streamed (SSE, with the usage
chunk when ``stream_options.include_usage``) or not, with exactly ``max_tokens`` output
tokens; says who it is in ``x-upstream`` and in the text, counts what it served, and can
be told to answer 503 to everything, as an overloaded vLLM does.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web


class Upstream:
    """One simulated endpoint on 127.0.0.1:``port``."""

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.served = 0
        self.fail_with: int | None = None
        self.token_delay_s = 0.0
        self.headers_seen: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        self.headers_seen.append({k.lower(): v for k, v in request.headers.items()})
        if self.fail_with is not None:
            return web.json_response(
                {"error": {"message": "overloaded", "type": "server_error", "code": "busy"}},
                status=self.fail_with,
            )
        body = await request.json()
        self.served += 1
        chat = request.path.endswith("chat/completions")
        tokens = max(1, int(body.get("max_tokens") or 8))
        prompt = len(json.dumps(body.get("messages") or body.get("prompt") or "")) // 4
        if body.get("stream"):
            return await self._stream(request, body, chat, tokens, prompt)
        text = " ".join([self.name] + ["tok"] * (tokens - 1))
        return web.json_response(
            _completion(body, chat, text, tokens, prompt), headers={"x-upstream": self.name}
        )

    async def _stream(
        self, request: web.Request, body: dict[str, Any], chat: bool, tokens: int, prompt: int
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "x-upstream": self.name}
        )
        await response.prepare(request)
        for index in range(tokens):
            piece = self.name if index == 0 else " tok"
            await response.write(_sse(_chunk(body, chat, piece)))
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
        finish = _chunk(body, chat, "", finish="length")
        await response.write(_sse(finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**_chunk(body, chat, None), "choices": [], "usage": _usage(prompt, tokens)}
            await response.write(_sse(usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _chunk(body: dict[str, Any], chat: bool, text: str | None, finish: str | None = None) -> Any:
    if chat:
        delta = {} if text is None else {"role": "assistant", "content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    kind = "chat.completion.chunk" if chat else "text_completion"
    return _envelope(body, kind, [choice])


def _completion(body: dict[str, Any], chat: bool, text: str, tokens: int, prompt: int) -> Any:
    if chat:
        message = {"role": "assistant", "content": text}
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "length"}
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
    result = _envelope(body, "chat.completion" if chat else "text_completion", [choice])
    result["usage"] = _usage(prompt, tokens)
    return result


def _envelope(body: dict[str, Any], kind: str, choices: list[Any]) -> dict[str, Any]:
    return {
        "id": "cmpl-test",
        "object": kind,
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": choices,
    }
