"""Server-sent events passed through as they arrive, checked, counted and closed cleanly.

The gateway forwards each upstream chunk at once, cut at its last complete event (``\\n\\n``)
so that a stream broken mid-way never leaves the client holding half an event: the part after
the cut waits for the rest of its event. Each forwarded event must be an SSE field line
(``data:``, ``event:``, ``id:``, ``retry:`` or a ``:`` comment) and a ``data:`` payload a JSON
object or ``[DONE]``; anything else is garbage, and the stream is treated as broken.

Output tokens are counted as the ``data:`` events carrying content (one token per event, as
vLLM streams; the role-only first chunk and a usage-only last chunk are not counted), which
feeds the core's in-flight view as the stream goes. The final usage chunk
(``stream_options.include_usage``), when the upstream sends one, is read at the end and wins
over the count.

An upstream that fails a request after sending its headers says so in an event of OpenAI's
error shape (``data: {"error": ...}``: vLLM's, and the simulated server's when it goes down).
Such an event is not a token; it is remembered (``error``) so that a stream failing before
its first token is retried elsewhere like any other failure before the first byte.
"""

from __future__ import annotations

import msgspec

from trafficmgr.requestpath.types import Usage

MAX_PENDING_BYTES = 1 << 20  # one event longer than this is not an inference stream
_FIELDS = (b"event:", b"id:", b"retry:", b":")
_DECODER = msgspec.json.Decoder()


class BrokenStream(Exception):
    """The upstream sent bytes that are not an SSE stream of JSON events."""


class ErrorEvent(BrokenStream):
    """The upstream's stream failed with an error event before its first token."""


class SseRelay:
    """Cut, check and count one upstream stream."""

    __slots__ = ("_pending", "_usage", "done", "error", "events", "tokens")

    def __init__(self) -> None:
        self._pending = b""
        self._usage: bytes | None = None
        self.tokens = 0
        self.events = 0
        self.done = False  # ``data: [DONE]`` seen
        self.error: bytes | None = None  # the payload of an upstream error event

    def feed(self, chunk: bytes) -> tuple[bytes, int]:
        """Take an upstream chunk; return the complete events to forward and their tokens."""
        data = self._pending + chunk if self._pending else chunk
        cut, sep = data.rfind(b"\n\n"), 2
        if cut < 0 or data.find(b"\r\n\r\n") >= 0:
            crlf = data.rfind(b"\r\n\r\n")
            if crlf >= 0:
                cut, sep = crlf, 4
        if cut < 0:
            if len(data) > MAX_PENDING_BYTES:
                raise BrokenStream("an event longer than 1 MiB")
            self._pending = data
            return b"", 0
        out, self._pending = data[: cut + sep], data[cut + sep :]
        tokens = self._check(out.replace(b"\r\n", b"\n") if sep == 4 else out)
        self.tokens += tokens
        return out, tokens

    def _check(self, block: bytes) -> int:
        tokens = 0
        for event in block.split(b"\n\n"):
            if not event:
                continue
            self.events += 1
            if not event.startswith(b"data:"):
                if event.startswith(_FIELDS):
                    continue
                raise BrokenStream(f"not an SSE event: {event[:40]!r}")
            payload = event[5:].lstrip()
            if payload.startswith(b"[DONE]"):
                self.done = True
                continue
            if not payload.startswith(b"{"):
                raise BrokenStream(f"an event whose data is not JSON: {payload[:40]!r}")
            if payload.startswith(b'{"error"'):
                self.error = payload
                continue
            if b'"usage"' in payload and b'"usage":null' not in payload:
                self._usage = payload
                if b'"choices":[]' in payload:
                    continue
            if b'"content":""' in payload or b'"text":""' in payload:
                continue
            tokens += 1
        return tokens

    @property
    def pending(self) -> bool:
        """Tell whether part of an event is held back (the stream ended mid-event)."""
        return bool(self._pending.strip())

    def usage(self) -> Usage | None:
        """Return the upstream's usage figures when it sent them, else None."""
        if self._usage is None:
            return None
        try:
            doc = _DECODER.decode(self._usage)
        except msgspec.DecodeError:
            return None
        return usage_of(doc)


class _UsageFigures(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int


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


def usage_of(doc: object) -> Usage | None:
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
