"""Drill instructions from the control plane: obeyed for their duration only, then the truth."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from agents.heartbeat import GpuReading, Heartbeat, ProbeReading

DRILL_KINDS = ("report_unhealthy", "silence", "latency", "degrade_gpu")
STOP_KINDS = ("none", "stop", "cancel")
MAX_DRILL_S = 3600.0  # a lost "end" never leaves a node lying for longer than this
DEFAULT_ADD_MS = 1000.0
DEFAULT_THROTTLE = ("hw_slowdown", "hw_thermal")


class DrillError(ValueError):
    """The instruction cannot be obeyed as given."""


@dataclass(frozen=True, slots=True)
class Drill:
    kind: str
    ends_at: float  # agent monotonic clock
    key: str
    id: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


def _epoch(text: str) -> float:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise DrillError(f"until is not ISO 8601: {text!r}") from exc
    if when.tzinfo is None:
        raise DrillError(f"until has no time zone: {text!r}")
    return when.timestamp()


def _duration(raw: Mapping[str, Any], wall_now: float, server_now: float | None) -> float:
    """Seconds left; ``until`` is read on the control plane's clock when its Date is known."""
    if "duration_s" in raw:
        value = raw["duration_s"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DrillError(f"duration_s must be a number, not {value!r}")
        seconds = float(value)
    elif isinstance(raw.get("until"), str):
        seconds = _epoch(raw["until"]) - (server_now if server_now is not None else wall_now)
    else:
        raise DrillError("a drill needs duration_s or until (ISO 8601)")
    if not math.isfinite(seconds):
        raise DrillError("drill duration is not finite")
    return min(seconds, MAX_DRILL_S)


def parse_drill(raw: Any, now: float, wall_now: float, server_now: float | None) -> Drill | None:
    """Read a drill instruction; None when it is already over. ``kind: none`` cancels."""
    if not isinstance(raw, Mapping):
        raise DrillError(f"a drill is an object, not {type(raw).__name__}")
    kind = raw.get("kind")
    drill_id = str(raw["id"]) if raw.get("id") is not None else None
    if kind in STOP_KINDS:
        return Drill(kind="none", ends_at=now, key="none", id=drill_id)
    if kind not in DRILL_KINDS:
        raise DrillError(f"unknown drill kind {kind!r}; expected one of {DRILL_KINDS}")
    params = raw.get("params") or {}
    if not isinstance(params, Mapping):
        raise DrillError("drill params must be an object")
    seconds = _duration(raw, wall_now, server_now)
    if seconds <= 0:
        return None
    key = drill_id or json.dumps(
        [kind, raw.get("until"), raw.get("duration_s"), params], sort_keys=True, default=str
    )
    return Drill(kind=str(kind), ends_at=now + seconds, key=key, id=drill_id, params=params)


class DrillState:
    """The drill being obeyed, if any; thread-safe (replies arrive on the push thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._drill: Drill | None = None
        self._done: deque[str] = deque(maxlen=64)  # ids already obeyed: a resent one is ignored

    def instruct(self, raw: Any, wall_now: float, server_now: float | None = None) -> str | None:
        """Take an instruction from a reply; return what changed, for the log."""
        now = self._clock()
        drill = parse_drill(raw, now, wall_now, server_now)
        with self._lock:
            current = self._current(now)
            if drill is None:
                return None
            if drill.kind == "none":
                if current is None:
                    return None
                self._finish(current)
                return f"drill {current.kind} cancelled by the control plane"
            if current is not None and current.key == drill.key:
                return None  # the same instruction again: never extend it
            if drill.id is not None and drill.id in self._done:
                return None
            if current is not None:
                self._finish(current)
            self._drill = drill
            return (
                f"drill {drill.kind} for {drill.ends_at - now:.1f} s, params {dict(drill.params)}"
            )

    def _finish(self, drill: Drill) -> None:
        if drill.id is not None:
            self._done.append(drill.id)
        self._drill = None

    def _current(self, now: float) -> Drill | None:
        drill = self._drill
        if drill is not None and now >= drill.ends_at:
            self._finish(drill)
            return None
        return drill

    def active(self) -> Drill | None:
        """The drill in force now, None once it has ended."""
        with self._lock:
            return self._current(self._clock())

    def silenced(self) -> bool:
        drill = self.active()
        return drill is not None and drill.kind == "silence"

    def apply(self, hb: Heartbeat) -> Heartbeat:
        """Return the heartbeat as the drill wants it reported, marked as a drill."""
        drill = self.active()
        if drill is None:
            return hb
        mark = {
            "kind": drill.kind,
            "id": drill.id,
            "remaining_s": round(drill.ends_at - self._clock(), 1),
        }
        hb = replace(hb, drill=mark)
        if drill.kind == "report_unhealthy":
            probe = hb.probe or ProbeReading(ok=False)
            return replace(hb, probe=replace(probe, ok=False, reason="drill: report_unhealthy"))
        if drill.kind == "latency":
            return _add_latency(hb, _number(drill.params, "add_ms", DEFAULT_ADD_MS))
        if drill.kind == "degrade_gpu":
            return replace(hb, gpus=tuple(_degrade(g, drill.params, len(hb.gpus)) for g in hb.gpus))
        return hb


def _number(params: Mapping[str, Any], key: str, default: float) -> float:
    value = params.get(key, default)
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


def _plus(value: float | None, add: float) -> float:
    return (value or 0.0) + add


def _add_latency(hb: Heartbeat, add_ms: float) -> Heartbeat:
    if hb.server is not None:
        server = replace(
            hb.server,
            ttft_p50_ms=_plus(hb.server.ttft_p50_ms, add_ms),
            ttft_p99_ms=_plus(hb.server.ttft_p99_ms, add_ms),
        )
        hb = replace(hb, server=server)
    if hb.probe is not None:
        hb = replace(hb, probe=replace(hb.probe, latency_ms=_plus(hb.probe.latency_ms, add_ms)))
    return hb


def _targets(params: Mapping[str, Any], count: int) -> set[int]:
    gpus = params.get("gpus", params.get("gpu", 0))
    if gpus == "all":
        return set(range(count))
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        return {gpus}
    if isinstance(gpus, list):
        return {g for g in gpus if isinstance(g, int) and not isinstance(g, bool)}
    return {0}


def _degrade(gpu: GpuReading, params: Mapping[str, Any], count: int) -> GpuReading:
    if gpu.index not in _targets(params, count):
        return gpu
    reasons = params.get("throttle_reasons", DEFAULT_THROTTLE)
    if not isinstance(reasons, (list, tuple)):
        reasons = DEFAULT_THROTTLE
    merged = tuple(dict.fromkeys([*gpu.throttle_reasons, *(str(r) for r in reasons)]))
    gpu = replace(gpu, throttle_reasons=merged, lost=gpu.lost or params.get("lost") is True)
    xid = params.get("xid")
    if isinstance(xid, int) and not isinstance(xid, bool):
        gpu = replace(gpu, xid_errors=gpu.xid_errors + 1, xid_last=xid)
    return gpu
