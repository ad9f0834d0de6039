"""Server-sent events passed through as they arrive: the shared stream reader, as the relay.

``SseRelay`` is ``requestpath.reading.StreamReader``: it cuts each upstream chunk at its last
complete event, checks and counts the events (the endpoint picker counts with the same
reader) and says whether a stream that ended is whole. The gateway adds ``ErrorEvent``: a
stream that fails with an error event before its first token is retried elsewhere like any
other failure before the first byte.
"""

from __future__ import annotations

from trafficmgr.requestpath.reading.stream import (
    MAX_PENDING_BYTES,
    BrokenStream,
    error_event,
    usage_of,
    whole_usage,
)
from trafficmgr.requestpath.reading.stream import StreamReader as SseRelay

__all__ = [
    "MAX_PENDING_BYTES",
    "BrokenStream",
    "ErrorEvent",
    "SseRelay",
    "error_event",
    "usage_of",
    "whole_usage",
]


class ErrorEvent(BrokenStream):
    """The upstream's stream failed with an error event before its first token."""
