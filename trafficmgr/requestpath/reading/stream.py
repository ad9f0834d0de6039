"""Read an upstream's server-sent events: cut, check, count, and judge whether they are whole.

Both fronts feed a response's bytes here as they arrive (the gateway forwards what comes
back; the endpoint picker only watches). ``feed`` returns the complete events, cut at the
last blank line, so a stream broken mid-way never leaves a client holding half an event. The
part after the cut waits in a bounded buffer (``MAX_PENDING_BYTES``); each new chunk is
searched for the blank line from where the last search stopped, so an event arriving in many
small pieces costs linear time, not quadratic.

Each event's lines must be SSE fields (``data:``, ``event:``, ``id:``, ``retry:``) or ``:``
comments, and its data ``[DONE]`` or a JSON object; anything else raises ``BrokenStream``.

Output tokens, one rule: an event generating output (a choice with ``delta.content``,
``delta.reasoning_content``, ``text`` or ``delta.tool_calls``) counts, per such choice, its
whitespace-separated words, at least one. vLLM sends one token per event, so this is its count
to the token (a token is at most a word); servers that batch several tokens per event
(``transformers serve``, TGI with ``stream_interval``) get the project's token rule
(``trafficmgr.routing.prompt``) instead of one per event, which would undercount them several
times over. The role-only first chunk, an empty ``content`` and a usage-only chunk count
nothing. The final ``usage`` chunk (``stream_options.include_usage``), when sent, is exact and
wins over the count (``usage``).

Completeness: a stream is whole (``complete``, asked once its HTTP body ended cleanly) after
``data: [DONE]``, or after a chunk with a ``finish_reason`` or a usage chunk with no partial
event left over: Hugging Face ``transformers serve`` ends that way, without ``[DONE]``. A body
that ends with neither is broken.

An upstream failing a request after its headers says so in an event of OpenAI's error shape
(``data: {"error": ...}``): not a token, remembered in ``error``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trafficmgr.requestpath.types import Usage

MAX_PENDING_BYTES = 1 << 20  # one event longer than this is not an inference stream
_FIELDS = (b"event:", b"id:", b"retry:", b":")


_ABSENT = msgspec.Raw()  # a field the event did not send
_NULL = b"null"


class BrokenStream(Exception):
    """The upstream sent bytes that are not an SSE stream of JSON events."""


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: msgspec.Raw = _ABSENT  # kept as bytes: only whether it is there counts


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: str | None = None
    finish_reason: str | None = None


class _UsageFigures(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _UsageFigures | None = None
    error: msgspec.Raw = _ABSENT


_CHUNK = msgspec.json.Decoder(_Chunk)
_DECODER = msgspec.json.Decoder()


class StreamReader:
    """Cut, check and count one upstream stream (see the module doc)."""

    __slots__ = ("_buf", "_usage", "done", "error", "events", "finished", "tokens")

    def __init__(self) -> None:
        self._buf = bytearray()  # bytes after the last blank line: part of the next event
        self._usage: Usage | None = None
        self.tokens = 0
        self.events = 0
        self.done = False  # ``data: [DONE]`` seen
        self.finished = False  # a choice's ``finish_reason`` seen
        self.error: bytes | None = None  # the payload of an upstream error event

    def feed(self, chunk: bytes) -> tuple[bytes, int]:
        """Take an upstream chunk; return the complete events in it and their tokens."""
        buf = self._buf
        start = max(0, len(buf) - 3)  # a blank line may straddle the old end
        buf += chunk
        lf, crlf = buf.rfind(b"\n\n", start), buf.rfind(b"\r\n\r\n", start)
        cut = max(lf + 2 if lf >= 0 else -1, crlf + 4 if crlf >= 0 else -1)
        if cut < 0:
            if len(buf) > MAX_PENDING_BYTES:
                raise BrokenStream("an event longer than 1 MiB")
            return b"", 0
        out = bytes(buf[:cut])
        del buf[:cut]
        tokens = self._check(out.replace(b"\r\n", b"\n") if b"\r" in out else out)
        self.tokens += tokens
        return out, tokens

    def _check(self, block: bytes) -> int:
        tokens = 0
        for event in block.split(b"\n\n"):
            if not event:
                continue
            self.events += 1
            data = []
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    data.append(line[5:].lstrip())
                elif line and not line.startswith(_FIELDS):
                    raise BrokenStream(f"not an SSE event: {line[:40]!r}")
            if data:
                tokens += self._data(b"\n".join(data))
        return tokens

    def _data(self, payload: bytes) -> int:
        if not payload:
            return 0  # an empty ``data:`` line (a keep-alive some servers send)
        if payload.startswith(b"[DONE]"):
            self.done = True
            return 0
        if not payload.startswith(b"{"):
            raise BrokenStream(f"an event whose data is not JSON: {payload[:40]!r}")
        try:
            chunk = _CHUNK.decode(payload)
        except msgspec.ValidationError:
            return self._loose(payload)
        except msgspec.DecodeError:
            raise BrokenStream(f"an event whose data is not JSON: {payload[:40]!r}") from None
        if _present(chunk.error):
            self.error = payload
            return 0
        if chunk.usage is not None:
            self._usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        tokens = 0
        for choice in chunk.choices or ():
            if choice.finish_reason is not None:
                self.finished = True
            tokens += _choice_tokens(choice)
        return tokens

    def _loose(self, payload: bytes) -> int:
        """Read an event of an unusual shape: only its usage and error count."""
        try:
            doc = _DECODER.decode(payload)
        except msgspec.DecodeError:
            raise BrokenStream(f"an event whose data is not JSON: {payload[:40]!r}") from None
        if isinstance(doc, dict) and doc.get("error") is not None:
            self.error = payload
        self._usage = usage_of(doc) or self._usage
        return 0

    @property
    def pending(self) -> bool:
        """Tell whether part of an event is held back (the stream ended mid-event)."""
        return bool(bytes(self._buf).strip())

    @property
    def answered(self) -> bool:
        """Tell whether the answer is whole: ``[DONE]``, a ``finish_reason`` or the usage."""
        return self.done or self.finished or self._usage is not None

    def complete(self) -> bool:
        """Tell whether a stream whose body ended cleanly is whole (see the module doc)."""
        return self.done or (self.answered and not self.pending)

    def usage(self) -> Usage | None:
        """Return the upstream's usage figures when it sent them, else None."""
        return self._usage


def _present(raw: msgspec.Raw) -> bool:
    return bool(raw) and bytes(raw) != _NULL


def _choice_tokens(choice: _Choice) -> int:
    delta = choice.delta
    if delta is not None:
        text = (delta.content or "") + (delta.reasoning_content or "")
        if not text and not _present(delta.tool_calls):
            return 0
    elif choice.text:
        text = choice.text
    else:
        return 0
    return max(1, len(text.split()))


class _Answer(msgspec.Struct):
    usage: _UsageFigures | None = None


_ANSWER = msgspec.json.Decoder(_Answer)


def whole_usage(body: bytes) -> Usage | None:
    """Return the usage of a whole (non-streamed) JSON answer; raise DecodeError if not JSON.

    Reads only ``usage``: the rest of the answer (its text) is checked to be JSON but never
    built into Python objects. Anything unusual (not an object, odd usage) takes the general
    path, with the same result."""
    try:
        usage = _ANSWER.decode(body).usage
    except msgspec.ValidationError:
        return usage_of(_DECODER.decode(body))
    return Usage(usage.prompt_tokens, usage.completion_tokens) if usage is not None else None


def usage_of(doc: Any) -> Usage | None:
    """Return the ``usage`` of a decoded response or chunk, when it has whole figures."""
    if not isinstance(doc, dict):
        return None
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt, completion)


def error_event(message: str, code: str) -> bytes:
    """Return the SSE event that ends a stream cut mid-way (OpenAI's error shape)."""
    doc = {"error": {"message": message, "type": "server_error", "code": code}}
    return b"data: " + msgspec.json.encode(doc) + b"\n\n"
