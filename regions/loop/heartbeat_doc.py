"""What a heartbeat may say, and how it becomes the engine's ``Heartbeat``.

A heartbeat is refused (400, naming the field) for unknown keys, wrong JSON types (no
silent coercion: ``"12"`` is not a number, ``true`` is not 1), NaN or ±Infinity (also when
spelled ``1e999``), ``util_pct`` outside 0..100, a ``util_source`` other than ``gpm_sm`` or
``nvml_util``, memory used above total, more than ``MAX_GPUS`` GPUs, over-long strings or
lists, a ``server.output_tokens`` histogram that is not cumulative (see
``validation.histograms``), a ``session`` that is not 1 to 64 letters, digits, ``-`` or
``_``, and ``sent_at`` more than ``FUTURE_S`` (the clock skew allowed, 30 s) ahead of or
``PAST_S`` (what an agent's buffer may hold after an outage, 10 min) behind the control
plane's clock.

Kept apart from ``ingest`` (which authorises, orders and stores heartbeats) because this is
the agents' contract (docs/architecture.md §4, Heartbeats) as pure checks and conversions:
no database, no hot state, no fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from regions.validation import BOOL, Field, Invalid, Kind, histograms, integer, number, obj, string
from trafficmgr.routing.table_json import parse_iso8601
from trafficmgr.routing.types import (
    GpuSample,
    Heartbeat,
    OutputHistogram,
    ProbeSample,
    ServerSample,
)

MAX_GPUS = 64
FUTURE_S = 30.0
PAST_S = 600.0
SERVER_KINDS = ("vllm", "tgi", "triton", "sim", "unknown")
# Where a GPU's util_pct came from: NVML GPM SM activity, or NVML utilization.gpu.
GPU_UTIL_SOURCES = ("gpm_sm", "nvml_util")
MAX_COUNT = 10_000_000
MAX_SAFE_INT = 2**53 - 1
MAX_HISTOGRAMS = 16  # models per server's output_tokens
MAX_BOUNDS = 64  # finite bounds per histogram


def _opt(kind: Kind, default: Any = None) -> Field:
    """An optional field that may also be null (the agent sends null for what it cannot read)."""
    return Field(("nullable", kind), required=False, default=default)


_TEXT_LIST = ("list", string(200, 0), 16)
_GPU = obj(
    {
        "index": Field(integer(0, 1023)),
        "uuid": _opt(string(128, 0), ""),
        "name": _opt(string(128, 0), ""),
        "util_pct": _opt(number(0, 100)),
        "util_source": _opt(("choice", GPU_UTIL_SOURCES)),
        "mem_used_mb": _opt(number(0, 1e9)),
        "mem_total_mb": _opt(number(0, 1e9)),
        "temp_c": _opt(number(-100, 250)),
        "power_w": _opt(number(0, 1e5)),
        "power_limit_w": _opt(number(0, 1e5)),
        "throttle_reasons": _opt(("list", string(64), 32), []),
        "ecc_errors": _opt(integer(0, MAX_COUNT)),
        "ecc_corrected": _opt(integer(0, MAX_COUNT)),
        "xid_errors": _opt(integer(0, MAX_COUNT), 0),
        "xid_last": _opt(integer(0, 1_000_000)),
        "lost": _opt(BOOL, False),
        "errors": _opt(_TEXT_LIST, []),
    }
)
_SERVER = obj(
    {
        "kind": Field(("choice", SERVER_KINDS)),
        "requests_running": _opt(integer(0, MAX_COUNT)),
        "requests_waiting": _opt(integer(0, MAX_COUNT)),
        "kv_cache_usage": _opt(number(0, 1)),
        "tokens_per_s": _opt(number(0, 1e9)),
        "ttft_p50_ms": _opt(number(0, 1e7)),
        "ttft_p99_ms": _opt(number(0, 1e7)),
        "models_loaded": _opt(("list", string(128), 256), []),
        "scrape_ok": _opt(BOOL, True),
        "garbage_lines": _opt(integer(0, MAX_COUNT), 0),
        "error": _opt(string(500, 0)),
        # per model, the server's cumulative histogram of output tokens (optional, newer agents)
        "output_tokens": _opt(histograms(MAX_HISTOGRAMS, MAX_BOUNDS, string(128))),
    }
)
_PROBE = obj(
    {
        "ok": Field(BOOL),
        "latency_ms": _opt(number(0, 1e7)),
        "status": _opt(integer(0, 999)),
        "reason": _opt(string(500, 0), ""),
    }
)
_AGENT = obj(
    {
        "version": _opt(string(64, 0), ""),
        "nvml": _opt(string(32, 0), ""),
        "driver": _opt(string(64, 0)),
        "dropped": _opt(integer(0, MAX_COUNT), 0),
        "errors": _opt(_TEXT_LIST, []),
    }
)
HEARTBEAT = obj(
    {
        "endpoint": Field(string(63)),
        "seq": Field(integer(0, MAX_SAFE_INT)),
        "sent_at": Field(("time",)),
        "interval_s": _opt(number(0, 3600)),
        "gpus": _opt(("list", _GPU, MAX_GPUS), []),
        "server": _opt(_SERVER),
        "probe": _opt(_PROBE),
        "agent": _opt(_AGENT),
        "drill": _opt(("scalars", 16, 200)),  # the drill the agent is obeying, as it reports it
        "session": _opt(string(64), ""),  # the agent run its seq counts in (newer agents)
    }
)
SESSION_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def error_deltas(
    gpus: list[dict[str, Any]], before: Mapping[str, list[int]]
) -> tuple[list[tuple[int, int]], dict[str, list[int]]]:
    """Turn the agent's running error counts into counts since its previous heartbeat.

    The agent reports XIDs seen since it started and uncorrected ECC errors since the driver
    loaded; the engine wants errors since the previous heartbeat. A count seen for the first
    time is a baseline (0 new); a count that went down was reset, so all of it is new.
    Returns (xid, ecc) per GPU and the running counts to keep.
    """
    deltas: list[tuple[int, int]] = []
    after: dict[str, list[int]] = {}
    for g in gpus:
        key = str(g["index"])
        prev = before.get(key)
        xid = g["xid_errors"] or 0
        ecc = g["ecc_errors"]
        new_xid = 0 if prev is None else (xid - prev[0] if xid >= prev[0] else xid)
        if ecc is None:
            new_ecc, ecc = 0, (prev[1] if prev else 0)
        else:
            new_ecc = 0 if prev is None else (ecc - prev[1] if ecc >= prev[1] else ecc)
        # A GPU that fell off the bus is unusable until fixed: one XID (79) per heartbeat.
        deltas.append((new_xid + (1 if g["lost"] else 0), new_ecc))
        after[key] = [xid, ecc]
    return deltas, after


def _zero(value: float | None) -> float:
    return 0.0 if value is None else value


def to_heartbeat(
    doc: dict[str, Any], received_at: float, totals: Mapping[str, list[int]]
) -> tuple[Heartbeat, dict[str, list[int]]]:
    """Check what a schema cannot say; build the engine's Heartbeat and the running counts."""
    sent_at = doc["sent_at"]
    if sent_at > received_at + FUTURE_S:
        raise Invalid(
            "sent_at", f"{sent_at - received_at:.0f} s in the future (at most {FUTURE_S:.0f} s)"
        )
    if sent_at < received_at - PAST_S:
        raise Invalid(
            "sent_at", f"{received_at - sent_at:.0f} s in the past (at most {PAST_S:.0f} s)"
        )
    seen: set[int] = set()
    for i, g in enumerate(doc["gpus"]):
        used, total = g["mem_used_mb"], g["mem_total_mb"]
        if used is not None and total is not None and used > total:
            raise Invalid(f"gpus[{i}].mem_used_mb", f"{used:g} MB used > {total:g} MB total")
        if g["index"] in seen:
            raise Invalid(f"gpus[{i}].index", f"GPU index {g['index']} appears twice")
        seen.add(g["index"])
    deltas, after = error_deltas(doc["gpus"], totals)
    gpus = tuple(
        GpuSample(
            g["index"],
            g["uuid"] or "",
            g["name"] or "",
            _zero(g["util_pct"]),
            _zero(g["mem_used_mb"]),
            _zero(g["mem_total_mb"]),
            _zero(g["temp_c"]),
            _zero(g["power_w"]),
            tuple(g["throttle_reasons"] or ()),
            ecc,
            xid,
        )
        for g, (xid, ecc) in zip(doc["gpus"], deltas, strict=True)
    )
    s = doc["server"]
    server = (
        None
        if s is None
        else ServerSample(
            s["kind"],
            s["requests_running"] or 0,
            s["requests_waiting"] or 0,
            _zero(s["kv_cache_usage"]),
            _zero(s["tokens_per_s"]),
            _zero(s["ttft_p50_ms"]),
            _zero(s["ttft_p99_ms"]),
            tuple(s["models_loaded"] or ()),
            output_histograms(s["output_tokens"]),
        )
    )
    p = doc["probe"]
    probe = None if p is None else ProbeSample(p["ok"], _zero(p["latency_ms"]))
    return Heartbeat(doc["endpoint"], doc["seq"], sent_at, received_at, gpus, server, probe), after


def output_histograms(doc: Mapping[str, Any] | None) -> tuple[OutputHistogram, ...]:
    """Turn a validated ``server.output_tokens`` into the engine's histograms."""
    if not doc:
        return ()
    return tuple(
        OutputHistogram(model, tuple(h["le"]), tuple(h["counts"]), h["count"])
        for model, h in doc.items()
    )


def parse_time(value: Any, path: str) -> float:
    """Read ``sent_at``: seconds since the epoch or an ISO 8601 string."""
    if isinstance(value, str) and len(value) > 40:
        raise Invalid(path, "at most 40 characters")
    try:
        seconds = parse_iso8601(value)
    except (ValueError, TypeError, OverflowError):
        raise Invalid(path, "expected seconds since the epoch or an ISO 8601 time") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise Invalid(path, "expected a finite number")
    return seconds
