"""Heartbeat records (docs/architecture.md §4) and their JSON form."""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Where a GPU's util_pct comes from: SM activity from GPM (the share of SMs busy), or NVML's
# utilization.gpu (the share of time any kernel ran, 100 % long before the GPU is saturated).
UTIL_GPM_SM = "gpm_sm"
UTIL_NVML = "nvml_util"
UTIL_SOURCES = (UTIL_GPM_SM, UTIL_NVML)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU as NVML saw it; a field NVML could not read is None, the reason in ``errors``."""

    index: int
    uuid: str
    name: str
    util_pct: float | None = None
    util_source: str | None = None  # one of UTIL_SOURCES; None when util_pct is None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    ecc_errors: int | None = None  # volatile (since driver load) uncorrected ECC errors
    ecc_corrected: int | None = None  # volatile corrected ECC errors
    xid_errors: int = 0  # XID events seen on this GPU since the agent started
    xid_last: int | None = None
    lost: bool = False  # fell off the bus or needs a reset: unusable until fixed
    errors: tuple[str, ...] = ()


# The output_tokens key of a server that serves one model without naming it in its metrics
# (TGI): the heartbeat names it after the one model loaded, or leaves it out.
ONE_MODEL = ""


@dataclass(frozen=True, slots=True)
class OutputLengths:
    """A server's histogram of tokens generated per request, cumulative since it started."""

    le: tuple[float, ...]  # finite upper bounds, ascending
    counts: tuple[int, ...]  # requests that generated at most each bound
    count: int  # all requests (the +Inf bucket)


@dataclass(frozen=True, slots=True)
class ServerReading:
    """The inference server's own view, from its Prometheus metrics."""

    kind: str  # vllm | tgi | triton | sim | unknown
    requests_running: int | None = None
    requests_waiting: int | None = None
    kv_cache_usage: float | None = None  # 0..1
    tokens_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    models_loaded: tuple[str, ...] = ()
    output_tokens: tuple[tuple[str, OutputLengths], ...] = ()  # (model or ONE_MODEL, histogram)
    scrape_ok: bool = True
    garbage_lines: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """Whether the model answers, not merely the port."""

    ok: bool
    latency_ms: float | None = None
    status: int | None = None
    reason: str = ""
    models: tuple[str, ...] = ()
    facts: Mapping[str, float] = field(default_factory=dict)  # e.g. TGI max_batch_total_tokens


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """How the agent itself is doing; lets the control plane tell a sick agent from a sick GPU."""

    version: str
    nvml: str  # ok | simulated | unavailable
    driver: str | None = None
    dropped: int = 0  # heartbeats dropped from the full buffer since start
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Heartbeat:
    endpoint: str
    seq: int
    sent_at: float  # agent wall clock, seconds since the epoch; the server uses its own time
    interval_s: float
    gpus: tuple[GpuReading, ...] = ()
    server: ServerReading | None = None
    probe: ProbeReading | None = None
    agent: AgentStatus | None = None
    drill: Mapping[str, Any] | None = None  # set while a drill instruction is being obeyed
    session: str = ""  # this agent run: its seq counts within it (a restart starts another)


def new_session() -> str:
    """A random id for one agent run (22 characters of base64url)."""
    return secrets.token_urlsafe(16)


class SeqCounter:
    """Strictly increasing sequence numbers that stay increasing across restarts.

    Nothing is persisted: each number is at least the wall clock in milliseconds, so a
    restarted agent starts above anything its predecessor sent (one heartbeat per ms at most).
    """

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        """Return the next sequence number."""
        with self._lock:
            self._last = max(self._last + 1, int(self._wall() * 1000))
            return self._last


def iso8601(ts: float) -> str:
    """Format epoch seconds as ISO 8601 UTC with milliseconds."""
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


# Bounds that keep one odd value (a garbled metrics page, a long error message) from getting a
# whole heartbeat refused; the control plane validates the same ranges and lengths.
MAX_COUNT = 10_000_000
MAX_MS = 1e7
MAX_LIST = 16
MAX_GPUS = 64
MAX_HISTOGRAMS = 16  # models per server.output_tokens
MAX_BOUNDS = 64  # finite bounds per histogram
MAX_SAFE_INT = 2**53 - 1


def _num(value: float | None, digits: int = 3, lo: float = 0.0, hi: float = 1e9) -> float | None:
    """Round; None for what is not finite or below ``lo``; at most ``hi``."""
    if value is None or not math.isfinite(value) or value < lo:
        return None
    return round(min(float(value), hi), digits)


def _count(value: int | None, hi: int = MAX_COUNT) -> int | None:
    return None if value is None or value < 0 else min(int(value), hi)


def _text(value: str | None, limit: int) -> str | None:
    return None if value is None else value[:limit]


def _texts(values: Sequence[str], limit: int, most: int = MAX_LIST) -> list[str]:
    return [v[:limit] for v in values[:most]]


def gpu_to_json(gpu: GpuReading) -> dict[str, Any]:
    total = _num(gpu.mem_total_mb, 1)
    used = _num(gpu.mem_used_mb, 1)
    util = _num(gpu.util_pct, 1, hi=100.0)
    doc: dict[str, Any] = {
        "index": gpu.index,
        "uuid": gpu.uuid[:128],
        "name": gpu.name[:128],
        "util_pct": util,
        "mem_used_mb": min(used, total) if used is not None and total is not None else used,
        "mem_total_mb": total,
        "temp_c": _num(gpu.temp_c, 1, lo=-100.0, hi=250.0),
        "power_w": _num(gpu.power_w, 1, hi=1e5),
        "power_limit_w": _num(gpu.power_limit_w, 1, hi=1e5),
        "throttle_reasons": _texts(gpu.throttle_reasons, 64, 32),
        "ecc_errors": _count(gpu.ecc_errors),
        "ecc_corrected": _count(gpu.ecc_corrected),
        "xid_errors": _count(gpu.xid_errors),
        "xid_last": _count(gpu.xid_last, 1_000_000),
        "lost": gpu.lost,
        "errors": _texts(gpu.errors, 200),
    }
    if util is not None and gpu.util_source in UTIL_SOURCES:
        doc["util_source"] = gpu.util_source  # optional: absent when util_pct is null
    return doc


def compact_lengths(h: OutputLengths, most: int = MAX_BOUNDS) -> OutputLengths | None:
    """Drop bounds that say nothing (all but the last empty one at the bottom, all past the
    first that holds every request), then every other bound until at most ``most`` are left;
    None for what is empty or not a cumulative histogram."""
    if len(h.le) != len(h.counts) or not all(map(math.isfinite, (h.count, *h.counts))):
        return None
    pairs: list[tuple[float, int]] = []
    for bound, cumulative in zip(h.le, h.counts, strict=True):
        if not (math.isfinite(bound) and bound > 0) or (pairs and bound <= pairs[-1][0]):
            return None
        pairs.append((float(bound), max(pairs[-1][1] if pairs else 0, int(cumulative))))
    count = min(max(int(h.count), pairs[-1][1] if pairs else 0), MAX_SAFE_INT)
    if count <= 0 or not pairs:
        return None
    start = 0
    while start + 1 < len(pairs) and pairs[start + 1][1] == 0:
        start += 1
    end = next((i + 1 for i, (_, c) in enumerate(pairs) if c >= count), len(pairs))
    pairs = pairs[start:end]
    if len(pairs) > most:  # merging neighbours keeps every remaining cumulative count right
        step = math.ceil(len(pairs) / most)
        pairs = pairs[::-step][::-1]  # the top bound stays
    return OutputLengths(tuple(b for b, _ in pairs), tuple(min(c, count) for _, c in pairs), count)


def output_tokens_to_json(server: ServerReading) -> dict[str, Any]:
    """Render the output-length histograms by model, compact; ``{}`` when there are none."""
    out: dict[str, Any] = {}
    for model, h in server.output_tokens:
        name = model
        if name == ONE_MODEL:
            if len(server.models_loaded) != 1:
                continue  # which model it counts is not known
            name = server.models_loaded[0]
        if not name or len(name) > 128 or name in out:
            continue
        compact = compact_lengths(h)
        if compact is None:
            continue
        out[name] = {"le": list(compact.le), "counts": list(compact.counts), "count": compact.count}
        if len(out) >= MAX_HISTOGRAMS:
            break
    return out


def server_to_json(server: ServerReading) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": server.kind,
        "requests_running": _count(server.requests_running),
        "requests_waiting": _count(server.requests_waiting),
        "kv_cache_usage": _num(server.kv_cache_usage, 4, hi=1.0),
        "tokens_per_s": _num(server.tokens_per_s, 1),
        "ttft_p50_ms": _num(server.ttft_p50_ms, 1, hi=MAX_MS),
        "ttft_p99_ms": _num(server.ttft_p99_ms, 1, hi=MAX_MS),
        "models_loaded": _texts(server.models_loaded, 128, 256),
        "scrape_ok": server.scrape_ok,
        "garbage_lines": _count(server.garbage_lines),
        "error": _text(server.error, 500),
    }
    lengths = output_tokens_to_json(server) if server.output_tokens else None
    if lengths:
        doc["output_tokens"] = lengths  # optional: absent when the server has no histogram
    return doc


def probe_to_json(probe: ProbeReading) -> dict[str, Any]:
    return {
        "ok": probe.ok,
        "latency_ms": _num(probe.latency_ms, 1, hi=MAX_MS),
        "status": probe.status if probe.status is not None and 0 <= probe.status <= 999 else None,
        "reason": probe.reason[:500],
    }


def _drill_to_json(drill: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in list(drill.items())[:16]:
        if isinstance(value, str):
            value = value[:200]
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        elif not (value is None or isinstance(value, bool | int | float)):
            value = str(value)[:200]
        out[str(key)[:64]] = value
    return out


def to_json(hb: Heartbeat) -> dict[str, Any]:
    """Render a heartbeat as the JSON object the control plane takes (no NaN, no infinities)."""
    doc: dict[str, Any] = {
        "endpoint": hb.endpoint,
        "seq": hb.seq,
        "sent_at": iso8601(hb.sent_at),
        "interval_s": _num(hb.interval_s, hi=3600.0),
        "gpus": [gpu_to_json(g) for g in hb.gpus[:MAX_GPUS]],
        "server": server_to_json(hb.server) if hb.server is not None else None,
        "probe": probe_to_json(hb.probe) if hb.probe is not None else None,
    }
    if hb.agent is not None:
        doc["agent"] = {
            "version": hb.agent.version[:64],
            "nvml": hb.agent.nvml[:32],
            "driver": _text(hb.agent.driver, 64),
            "dropped": _count(hb.agent.dropped),
            "errors": _texts(hb.agent.errors, 200),
        }
    if hb.drill is not None:
        doc["drill"] = _drill_to_json(hb.drill)
    if hb.session:
        doc["session"] = hb.session[:64]
    return doc
