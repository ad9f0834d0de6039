"""Faults a simulated endpoint can be told to show, for tests and drills.

One fault per endpoint at a time, set by ``--fault NAME=KIND[,key=value...]`` at start or by
``POST /admin/fault`` while running (``kind: none`` clears it):

- ``5xx``: inference requests answer ``status`` (default 500; 503 is the other usual one),
  with probability ``rate`` (default 1); health stays good, like a server with a bug.
- ``slow``: inference requests wait ``delay_ms`` (default 1000, real milliseconds, never
  scaled) before the engine sees them, like a congested network or front end.
- ``stall``: streams stop sending tokens (headers and earlier tokens already sent) and keep
  the connection open; non-streamed answers are held back. The engine keeps working; what
  piled up is sent when the fault is cleared or the client gives up.
- ``refuse``: the listening socket closes (new connections are refused) and idle keep-alive
  connections are closed; requests in flight finish.
- ``down``: ``/health`` and every ``/v1`` path answer 503 and requests in flight are aborted,
  like an engine that died under its front end.

``duration_s`` clears the fault by itself after that many seconds (the only way back from
``refuse`` on a server with a single endpoint and no ``--admin-listen``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class FaultKind(StrEnum):
    NONE = "none"
    ERROR = "5xx"
    SLOW = "slow"
    STALL = "stall"
    REFUSE = "refuse"
    DOWN = "down"


class FaultError(ValueError):
    """A fault description that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind = FaultKind.NONE
    status: int = 500
    rate: float = 1.0
    delay_ms: float = 1000.0
    duration_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["kind"] = self.kind.value
        return doc


NO_FAULT = Fault()
_NUMBERS = {"status": (500, 599), "rate": (0.0, 1.0), "delay_ms": (0.0, 3.6e6)}


def fault_from_dict(doc: Any) -> Fault:
    """Build a fault from ``{"kind": ..., "status"?, "rate"?, "delay_ms"?, "duration_s"?}``."""
    if not isinstance(doc, dict):
        raise FaultError("a fault must be a JSON object")
    unknown = set(doc) - {"kind", "endpoint", "status", "rate", "delay_ms", "duration_s"}
    if unknown:
        raise FaultError(f"unknown field(s): {', '.join(sorted(unknown))}")
    try:
        kind = FaultKind(str(doc.get("kind")))
    except ValueError:
        kinds = "|".join(k.value for k in FaultKind)
        raise FaultError(f"'kind' must be one of {kinds}") from None
    values: dict[str, Any] = {}
    for key, (low, high) in _NUMBERS.items():
        if key in doc:
            values[key] = _number(doc[key], key, low, high)
    if "status" in values:
        values["status"] = int(values["status"])
    duration = doc.get("duration_s")
    if duration is not None:
        values["duration_s"] = _number(duration, "duration_s", 0.0, 86400.0)
    return Fault(kind, **values)


def _number(value: Any, key: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise FaultError(f"'{key}' must be a number")
    if not low <= value <= high:
        raise FaultError(f"'{key}' must be within {low:g}..{high:g}")
    if key == "status" and value != int(value):
        raise FaultError("'status' must be an integer")
    return float(value)


def parse_fault_flag(text: str) -> tuple[str, Fault]:
    """Parse ``NAME=KIND[,key=value...]`` (``*`` names every endpoint)."""
    name, sep, spec = text.partition("=")
    if not sep or not name or not spec:
        raise FaultError(f"{text!r} is not NAME=KIND[,key=value...]")
    kind, *pairs = spec.split(",")
    doc: dict[str, Any] = {"kind": kind}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise FaultError(f"{pair!r} in {text!r} is not key=value")
        try:
            doc[key] = float(value)
        except ValueError:
            raise FaultError(f"{key}={value!r} in {text!r} is not a number") from None
    return name, fault_from_dict(doc)
