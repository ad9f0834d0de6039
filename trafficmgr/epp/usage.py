"""Read token usage out of a response body as it streams through Envoy.

Streamed responses (SSE) are read line by line: the generated text counts for progress
under the project's token rule (whitespace-separated words, ``trafficmgr.routing.prompt``),
and the final chunk's ``usage`` (``stream_options.include_usage``) gives the exact counts.
Plain JSON responses are buffered up to a limit and their ``usage`` read at the end. The
body itself is never changed.
"""

from __future__ import annotations

import json
from typing import Any

from trafficmgr.epp.decision import Usage
from trafficmgr.routing.prompt import count_tokens

MAX_LINE_BYTES = 1 << 20
MAX_JSON_BYTES = 8 << 20


def usage_of(data: Any) -> Usage | None:
    """The ``usage`` object of an OpenAI response or chunk, if it carries one."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def chunk_text(data: Any) -> str:
    """The text a streamed chunk generated (chat ``delta.content`` or completion ``text``)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list):
        return ""
    parts = []
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


class ResponseReader:
    """Follows one response body; ``feed`` returns the new output tokens it saw."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.usage: Usage | None = None
        self.tokens = 0
        self.complete = False  # a stream's ``data: [DONE]`` was read: the answer is whole
        self._pending = b""
        self._overflow = False
        self._mid_word = False  # the text so far ends inside a word

    def feed(self, chunk: bytes) -> int:
        if self._overflow:
            return 0
        self._pending += chunk
        if not self.streaming:
            self._overflow = len(self._pending) > MAX_JSON_BYTES
            return 0
        *lines, self._pending = self._pending.split(b"\n")
        if len(self._pending) > MAX_LINE_BYTES:
            self._overflow = True
        before = self.tokens
        for line in lines:
            self._read_line(line.strip())
        return self.tokens - before

    def finish(self) -> Usage | None:
        """The usage reported by the end of the body (None when none was reported)."""
        if not self._overflow and self._pending:
            if self.streaming:
                self._read_line(self._pending.strip())
            else:
                self._read_json(self._pending)
        self._pending = b""
        return self.usage

    def _read_line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.complete = True
            return
        if not payload:
            return
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return
        self._count(chunk_text(data))
        self.usage = usage_of(data) or self.usage

    def _count(self, text: str) -> None:
        """Add the words of ``text``; one split across two chunks counts once."""
        if not text:
            return
        words = count_tokens(text)
        if self._mid_word and not text[0].isspace() and words:
            words -= 1
        self.tokens += words
        self._mid_word = not text[-1].isspace()

    def _read_json(self, body: bytes) -> None:
        try:
            self.usage = usage_of(json.loads(body))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return
