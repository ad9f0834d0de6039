"""OpenAI-shaped answers: whole bodies, server-sent event chunks and errors.

Streamed chunks are the per-token hot path of the benchmarks' backend, so each request
builds its two JSON templates once and a token's event is a string concatenation (the
words come from a fixed vocabulary that needs no escaping). The layout follows vLLM's: the
chat stream opens with an empty assistant delta, each token is one event, the last token's
event carries ``finish_reason``, then (``stream_options.include_usage``) one chunk with no
choices and the usage, then ``data: [DONE]``. With ``include_usage`` every other chunk has
``"usage": null``, as OpenAI documents.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import msgspec

from trafficmgr.simserver.protocol import Generation

DONE = b"data: [DONE]\n\n"
ERROR_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}
_ids = itertools.count(1)
_encode = msgspec.json.encode


def error_body(status: int, code: str, message: str, param: str | None = None) -> bytes:
    """Return ``{"error": {"message", "type", "code", "param"}}``."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return _encode({"error": {"message": message, "type": kind, "code": code, "param": param}})


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


class Reply:
    """Builds one request's answer, whole or as a stream of events."""

    __slots__ = ("_close", "_finish", "_open", "_shut", "created", "gen", "id")

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.id = f"{'chatcmpl' if gen.chat else 'cmpl'}-sim{next(_ids):x}"
        self.created = int(time.time())
        head = (
            f'data: {{"id":"{self.id}","object":"'
            f'{"chat.completion.chunk" if gen.chat else "text_completion"}",'
            f'"created":{self.created},"model":{_encode(gen.model).decode()},"choices":[{{"index":0,'
        )
        self._open = head + ('"delta":{"content":"' if gen.chat else '"text":"')
        tail = '"}' if gen.chat else '"'
        extra = ',"usage":null}\n\n' if gen.include_usage else "}\n\n"
        self._close = tail + ',"logprobs":null,"finish_reason":null}]' + extra
        self._finish = tail + ',"logprobs":null,"finish_reason":"'
        self._shut = '"}]' + extra

    def whole(self, text: str, completion: int, finish: str, cached: int) -> bytes:
        """Return the non-streamed body."""
        gen = self.gen
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if gen.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return _encode(
            {
                "id": self.id,
                "object": "chat.completion" if gen.chat else "text_completion",
                "created": self.created,
                "model": gen.model,
                "choices": [choice],
                "usage": usage(gen.input_tokens, completion, cached),
            }
        )

    def opening(self) -> bytes:
        """Return the chat stream's first event (the assistant role), empty for completions."""
        if not self.gen.chat:
            return b""
        role = self._open.replace('"content":"', '"role":"assistant","content":"')
        return (role + self._close).encode()

    def tokens(self, pieces: list[str], finish: str | None) -> bytes:
        """Return one event per token; the last carries ``finish`` when given."""
        open_, close = self._open, self._close
        if finish is None:
            return "".join([open_ + p + close for p in pieces]).encode()
        events = [open_ + p + close for p in pieces[:-1]]
        events.append(open_ + pieces[-1] + self._finish + finish + self._shut)
        return "".join(events).encode()

    def usage_event(self, completion: int, cached: int) -> bytes:
        """Return the final usage chunk (``include_usage``)."""
        gen = self.gen
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if gen.chat else "text_completion",
            "created": self.created,
            "model": gen.model,
            "choices": [],
            "usage": usage(gen.input_tokens, completion, cached),
        }
        return b"data: " + _encode(body) + b"\n\n"

    @staticmethod
    def error_event(status: int, code: str, message: str) -> bytes:
        """Return an error inside a stream that already answered 200."""
        return b"data: " + error_body(status, code, message) + b"\n\n"
