"""Follow a response body as it streams through Envoy: tokens, usage, whether it ended whole.

Streamed responses (SSE) go through the shared stream reader (``requestpath.reading``), the
one the gateway relays with: the same token count for ``progress``, the same usage, the same
judgement of a stream's end (whole after ``[DONE]``, or after a ``finish_reason`` or usage
chunk when the body ended cleanly). Plain JSON responses are buffered up to a limit and their
``usage`` read at the end. The body itself is never changed.
"""

from __future__ import annotations

import msgspec

from trafficmgr.epp.decision import Usage
from trafficmgr.requestpath.reading.stream import BrokenStream, StreamReader, whole_usage

MAX_JSON_BYTES = 8 << 20


class ResponseReader:
    """Follows one response body; ``feed`` returns the new output tokens it saw."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self._stream = StreamReader() if streaming else None
        self._garbage = False  # the stream broke the SSE rules: read no further
        self._parts: list[bytes] = []  # a JSON body's chunks, joined once at the end
        self._size = 0
        self._overflow = False

    def feed(self, chunk: bytes) -> int:
        if self._stream is None:
            self._size += len(chunk)
            self._overflow = self._overflow or self._size > MAX_JSON_BYTES
            if not self._overflow:
                self._parts.append(chunk)
            return 0
        if self._garbage:
            return 0
        try:
            return self._stream.feed(chunk)[1]
        except BrokenStream:
            self._garbage = True
            return 0

    @property
    def answered(self) -> bool:
        """Tell whether the answer is whole as far as read (``[DONE]``, a finish, usage)."""
        return self._stream is not None and not self._garbage and self._stream.answered

    @property
    def error(self) -> bool:
        """Tell whether the upstream's stream carried an error event."""
        return self._stream is not None and self._stream.error is not None

    def broken(self) -> bool:
        """Tell whether a stream whose body ended is not whole (a JSON body never is)."""
        return self._stream is not None and (self._garbage or not self._stream.complete())

    def finish(self) -> Usage | None:
        """The usage reported by the end of the body (None when none was reported)."""
        if self._stream is not None:
            return self._stream.usage()
        if self._overflow or not self._parts:
            return None
        body, self._parts = b"".join(self._parts), []
        try:
            return whole_usage(body)
        except msgspec.DecodeError:
            return None
