"""What a dashboard may send over its WebSocket, checked before anything acts on it.

The page mostly listens, but any signed-in viewer can write to the socket. Every frame used
to go to ``json.loads`` unchecked: a binary frame, broken JSON or a deeply nested array raised
in the handler and dropped the socket, and a 16 MiB frame was decoded whole (a uvicorn worker
grew from 133 to 524 MB). Now:

- the server refuses messages over ``SERVER_MAX_BYTES`` and closes the socket with 1009
  (uvicorn ``--ws-max-size``, in docker-compose.yml and deploy/k8s/web.yaml; it bounds what
  a page sends only). Daphne, which ``manage.py demo`` runs, keeps its own 1 MiB: its limit
  also bounds what it sends, and a snapshot of a large fleet is hundreds of kilobytes;
- ``read`` refuses text over ``MAX_MESSAGE_BYTES`` before decoding it (the socket is then
  closed with 1009 after the error), any binary frame, and JSON nested deeper than
  ``MAX_DEPTH`` (counted before the decoder recurses);
- a message is one JSON object ``{"type": T, "id"?: string or integer}``, T one of:
  ``ping``, answered ``{"type": "pong", "id"}``; ``snapshot``, answered with a fresh snapshot
  (at most one per ``SNAPSHOT_EVERY_S`` per socket: it costs a dozen queries);
- anything else is answered ``{"type": "error", "error": CODE, "detail", "field"}`` and the
  socket stays open, up to ``MAX_PROBLEMS`` of them (then it is closed with 1008).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from regions.validation import Invalid, parse_json

MAX_MESSAGE_BYTES = 4096  # the page sends a few dozen bytes
MAX_DEPTH = 8  # arrays and objects inside each other, counted before decoding
SERVER_MAX_BYTES = 65536  # what the web server itself takes in one message
MAX_PROBLEMS = 50  # bad messages a socket may send before it is closed
SNAPSHOT_EVERY_S = 5.0
TYPES = ("ping", "snapshot")
KEYS = ("type", "id")
ID_MAX_CHARS = 64
CLOSE_TOO_BIG = 1009  # RFC 6455: message too big
CLOSE_POLICY = 1008  # RFC 6455: policy violation


@dataclass(frozen=True, slots=True)
class Request:
    type: str
    id: str | int | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    detail: str
    field: str = "message"
    close: int | None = None  # close the socket with this code after answering
    id: str | int | None = None

    def doc(self) -> dict[str, Any]:
        """The error message the page gets."""
        out: dict[str, Any] = {
            "type": "error",
            "error": self.code,
            "detail": self.detail,
            "field": self.field,
        }
        if self.id is not None:
            out["id"] = self.id
        return out


def read(text: str | None, data: bytes | None) -> Request | Problem:
    """Check one frame: size first (nothing is decoded past it), then JSON, then the shape."""
    if text is None:
        size = len(data or b"")
        if size > MAX_MESSAGE_BYTES:
            return too_big(size)
        return Problem("binary_frame", "binary frames are not accepted: send JSON text")
    if len(text) > MAX_MESSAGE_BYTES:  # characters: at least a quarter of the bytes
        return too_big(len(text))
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_MESSAGE_BYTES:
        return too_big(len(raw))
    if nesting(text) > MAX_DEPTH:  # before the decoder recurses into it
        return Problem("too_deep", f"JSON nested more than {MAX_DEPTH} levels deep")
    try:
        doc = parse_json(raw)
    except Invalid as exc:
        return Problem("invalid_json", exc.message)
    return shape(doc)


def nesting(text: str) -> int:
    """Return how deep arrays and objects nest in ``text`` (brackets inside strings aside)."""
    deepest = depth = 0
    quoted = escaped = False
    for char in text:
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def too_big(size: int) -> Problem:
    return Problem(
        "too_large",
        f"a message may have at most {MAX_MESSAGE_BYTES} bytes, this one has {size} or more",
        close=CLOSE_TOO_BIG,
    )


def shape(doc: Any) -> Request | Problem:
    """Check a decoded message: an object of known keys, a known type, an optional id."""
    if not isinstance(doc, dict):
        return Problem("invalid", "expected a JSON object")
    ident = doc.get("id")
    if ident is not None and not valid_id(ident):
        return Problem("invalid", f"a string of 1 to {ID_MAX_CHARS} characters or an integer", "id")
    unknown = sorted(str(k)[:32] for k in doc if k not in KEYS)
    if unknown:
        return Problem("invalid", f"unknown field (known: {', '.join(KEYS)})", unknown[0], id=ident)
    kind = doc.get("type")
    if not isinstance(kind, str) or kind not in TYPES:
        return Problem("invalid", f"expected one of {', '.join(TYPES)}", "type", id=ident)
    return Request(kind, ident)


def valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= 2**53 - 1
    return isinstance(value, str) and 1 <= len(value) <= ID_MAX_CHARS
