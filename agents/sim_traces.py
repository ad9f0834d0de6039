"""Request arrivals for the simulated node: a replayed trace or a Poisson process."""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

MAX_TOKENS = 131072


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float  # seconds after the trace's first request
    input_tokens: int
    output_tokens: int


class TraceError(ValueError):
    """The file is not a trace this simulator can read."""


def _clamp(tokens: float) -> int:
    return max(1, min(MAX_TOKENS, round(tokens)))


def _rows_azure(rows: Iterator[list[str]]) -> Iterator[tuple[float, float, float]]:
    for row in rows:
        yield datetime.fromisoformat(row[0]).timestamp(), float(row[1]), float(row[2])


def _rows_burstgpt(rows: Iterator[list[str]], header: list[str]) -> Iterator[tuple[float, ...]]:
    at, inp, out = (header.index(c) for c in ("Timestamp", "Request tokens", "Response tokens"))
    for row in rows:
        yield float(row[at]), float(row[inp]), float(row[out])


def _read_csv(path: Path) -> list[tuple[float, ...]]:
    with path.open(newline="") as handle:
        rows = csv.reader(handle)
        header = [c.strip() for c in next(rows, [])]
        if header[:3] == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
            return list(_rows_azure(rows))
        if {"Timestamp", "Request tokens", "Response tokens"} <= set(header):
            return list(_rows_burstgpt(rows, header))
    raise TraceError(f"{path}: unknown CSV header {header[:6]}")


def _read_jsonl(path: Path) -> list[tuple[float, ...]]:
    rows: list[tuple[float, ...]] = []
    with path.open() as handle:
        for line in handle:
            if line.strip():
                doc = json.loads(line)
                ts = float(doc["timestamp"]) / 1000  # Mooncake: milliseconds
                rows.append((ts, float(doc["input_length"]), float(doc["output_length"])))
    return rows


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Read an Azure LLM CSV, BurstGPT CSV or Mooncake JSONL trace (told apart by content)."""
    path = Path(path)
    with path.open() as handle:
        first = handle.readline().lstrip()
    try:
        rows = _read_jsonl(path) if first.startswith("{") else _read_csv(path)
    except (KeyError, IndexError, ValueError) as exc:
        raise TraceError(f"{path}: unreadable trace ({exc})") from exc
    rows = [r for r in rows if r[2] > 0]  # BurstGPT logs failures with no response
    if not rows:
        raise TraceError(f"{path}: no requests")
    rows.sort(key=lambda r: r[0])  # stable: same-time requests keep their order
    start = rows[0][0]
    return [TraceRequest(r[0] - start, _clamp(r[1]), _clamp(r[2])) for r in rows]


class PoissonArrivals:
    """Poisson arrivals with log-normal prompt and output lengths."""

    def __init__(
        self,
        rate_per_s: float,
        rng: random.Random,
        mean_input: float = 1024.0,
        mean_output: float = 256.0,
    ) -> None:
        self.rate_per_s = max(rate_per_s, 1e-9)
        self.mean_input = mean_input
        self.mean_output = mean_output
        self._rng = rng
        self._next = rng.expovariate(self.rate_per_s)

    def _length(self, mean: float) -> int:
        sigma = 1.0
        return _clamp(self._rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma))

    def until(self, t: float) -> list[TraceRequest]:
        """Arrivals up to time ``t`` (seconds since the simulation began)."""
        out: list[TraceRequest] = []
        while self._next <= t:
            out.append(
                TraceRequest(
                    self._next, self._length(self.mean_input), self._length(self.mean_output)
                )
            )
            self._next += self._rng.expovariate(self.rate_per_s)
        return out


class TraceArrivals:
    """A trace replayed in a loop, its clock stretched by ``time_scale`` (> 1: slower)."""

    def __init__(
        self, requests: list[TraceRequest], time_scale: float, offset: float = 0.0
    ) -> None:
        if not requests:
            raise TraceError("empty trace")
        self._requests = requests
        self._scale = time_scale
        if time_scale <= 0:
            raise TraceError("time_scale must be positive")
        gap = requests[-1].at / max(1, len(requests) - 1)
        self._period = max(requests[-1].at + gap, 1.0) * time_scale
        self._base = -offset  # loop start, in simulation seconds
        self._pos = 0
        while self._pos < len(requests) and requests[self._pos].at * time_scale < offset:
            self._pos += 1

    def until(self, t: float) -> list[TraceRequest]:
        out: list[TraceRequest] = []
        while True:
            if self._pos >= len(self._requests):
                self._pos, self._base = 0, self._base + self._period
            req = self._requests[self._pos]
            at = self._base + req.at * self._scale
            if at > t:
                return out
            out.append(TraceRequest(at, req.input_tokens, req.output_tokens))
            self._pos += 1
