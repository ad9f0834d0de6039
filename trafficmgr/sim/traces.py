"""Request traces for the simulator: Azure LLM inference CSV, Mooncake JSONL, BurstGPT CSV.

The format is detected from the content, not the file name:

- Azure (``TIMESTAMP,ContextTokens,GeneratedTokens``): ISO date-times (seven fractional
  digits in the published files) or plain seconds.
- Mooncake JSONL (one object a line: ``timestamp`` in ms, ``input_length``,
  ``output_length``, optional ``hash_ids``, one hash per 512-token prefix block).
- BurstGPT (``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``):
  seconds; rows with 0 response tokens are failed requests in that dataset and are skipped
  with a warning.

Bad input raises ``TraceError`` naming the file, the line and the column: an unknown header,
a row with the wrong number of fields, a missing or non-numeric value, NaN or infinity,
negative token counts, an empty file or one without requests. Timestamps that go backwards
are sorted (stable) with a warning, because published traces are merged logs and rows a few
ms out of order are common; ``strict=True`` makes that an error instead.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

AZURE = "azure"
MOONCAKE = "mooncake"
BURSTGPT = "burstgpt"
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = (
    "Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type",
)  # fmt: skip
MAX_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float  # seconds since the trace's first request
    input_tokens: int
    output_tokens: int
    model: str | None = None
    prefix_hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    path: str
    format: str  # azure | mooncake | burstgpt
    requests: tuple[TraceRequest, ...]
    warnings: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return self.requests[-1].at if self.requests else 0.0


class TraceError(ValueError):
    """A trace file cannot be read; the message names the file, line and column."""

    def __init__(
        self, path: str, message: str, line: int | None = None, column: str | None = None
    ) -> None:
        self.path, self.line, self.column = path, line, column
        where = f":{line}" if line is not None else ""
        col = f": column {column!r}" if column else ""
        super().__init__(f"{path}{where}{col}: {message}")


def read_trace(path: str, *, strict: bool = False) -> Trace:
    """Read a trace file in any supported format."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not UTF-8 text (byte {exc.start})") from exc
    return parse_trace(text, path, strict=strict)


def parse_trace(text: str, path: str = "<trace>", *, strict: bool = False) -> Trace:
    """Parse trace text; see the module docstring for formats and errors."""
    text = text.lstrip("\ufeff")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        raise TraceError(path, "the file is empty")
    if first.startswith("{"):
        fmt, rows = MOONCAKE, _mooncake_rows(text, path)
    else:
        fmt, rows = _csv_rows(text, path)
    return _finish(path, fmt, rows, strict)


# A parsed row: (timestamp s, input, output, model, hashes, line).
_Row = tuple[float, int, int, str | None, tuple[int, ...], int]


def _finish(path: str, fmt: str, rows: list[_Row], strict: bool) -> Trace:
    """Check order, sort if needed and make times relative to the first request."""
    warnings: list[str] = []
    if fmt == BURSTGPT:
        failed = [r for r in rows if r[2] == 0]
        if failed:
            rows = [r for r in rows if r[2] > 0]
            warnings.append(
                f"skipped {len(failed)} rows with 0 response tokens (failed "
                f"requests), first at line {failed[0][5]}"
            )
    if not rows:
        raise TraceError(path, "no requests in the file")
    back = [(prev, row) for prev, row in pairwise(rows) if row[0] < prev[0]]
    if back:
        prev, row = back[0]
        if strict:
            raise TraceError(
                path, f"timestamp goes backwards ({row[0]:.6f} s after {prev[0]:.6f} s)", row[5]
            )
        rows = sorted(rows, key=lambda r: r[0])
        warnings.append(
            f"{len(back)} rows out of timestamp order (first at line {row[5]}); sorted by timestamp"
        )
    t0 = rows[0][0]
    requests = tuple(TraceRequest(t - t0, i, o, m, h) for t, i, o, m, h, _ in rows)
    return Trace(path, fmt, requests, tuple(warnings))


def _csv_rows(text: str, path: str) -> tuple[str, list[_Row]]:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    if set(header) == set(AZURE_COLUMNS) and len(header) == len(AZURE_COLUMNS):
        fmt = AZURE
    elif set(header) == set(BURSTGPT_COLUMNS) and len(header) == len(BURSTGPT_COLUMNS):
        fmt = BURSTGPT
    else:
        raise TraceError(
            path,
            f"unrecognised header {','.join(header)!r}; expected "
            f"{','.join(AZURE_COLUMNS)!r} (Azure), "
            f"{','.join(BURSTGPT_COLUMNS)!r} (BurstGPT) or JSON lines "
            "(Mooncake)",
            1,
        )
    col = {name: i for i, name in enumerate(header)}
    rows: list[_Row] = []
    for fields in reader:
        line = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            raise TraceError(path, f"expected {len(header)} fields, got {len(fields)}", line)
        rows.append(
            _azure_row(fields, col, path, line)
            if fmt == AZURE
            else _burst_row(fields, col, path, line)
        )
    return fmt, rows


def _azure_row(fields: list[str], col: dict[str, int], path: str, line: int) -> _Row:
    stamp = _timestamp(fields[col["TIMESTAMP"]], path, line, "TIMESTAMP")
    tokens_in = _tokens(fields[col["ContextTokens"]], path, line, "ContextTokens")
    tokens_out = _tokens(fields[col["GeneratedTokens"]], path, line, "GeneratedTokens")
    return stamp, tokens_in, tokens_out, None, (), line


def _burst_row(fields: list[str], col: dict[str, int], path: str, line: int) -> _Row:
    stamp = _number(fields[col["Timestamp"]], path, line, "Timestamp")
    tokens_in = _tokens(fields[col["Request tokens"]], path, line, "Request tokens")
    tokens_out = _tokens(fields[col["Response tokens"]], path, line, "Response tokens")
    model = fields[col["Model"]].strip()
    if not model:
        raise TraceError(path, "empty model name", line, "Model")
    return stamp, tokens_in, tokens_out, model, (), line


def _mooncake_rows(text: str, path: str) -> list[_Row]:
    rows: list[_Row] = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceError(
                path, f"invalid JSON at character {exc.colno}: {exc.msg}", line
            ) from exc
        if not isinstance(doc, dict):
            raise TraceError(path, "expected a JSON object", line)
        for key in ("timestamp", "input_length", "output_length"):
            if key not in doc:
                raise TraceError(path, "missing key", line, key)
        stamp = _number(doc["timestamp"], path, line, "timestamp") / 1000.0
        tokens_in = _tokens(doc["input_length"], path, line, "input_length")
        tokens_out = _tokens(doc["output_length"], path, line, "output_length")
        rows.append((stamp, tokens_in, tokens_out, None, _hashes(doc, path, line), line))
    return rows


def _hashes(doc: dict[str, Any], path: str, line: int) -> tuple[int, ...]:
    value = doc.get("hash_ids", [])
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise TraceError(path, "expected a list of integers", line, "hash_ids")
    return tuple(value)


def _number(value: Any, path: str, line: int, column: str) -> float:
    if isinstance(value, bool):
        raise TraceError(path, f"{value!r} is not a number", line, column)
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise TraceError(path, f"{value!r} is not a number", line, column) from None
    if math.isnan(number) or math.isinf(number):
        raise TraceError(path, f"{value!r} is not a finite number", line, column)
    return number


def _tokens(value: Any, path: str, line: int, column: str) -> int:
    if isinstance(value, str) and not value.strip():
        raise TraceError(path, "missing value", line, column)
    number = _number(value, path, line, column)
    if number < 0 or number != int(number) or number > MAX_TOKENS:
        raise TraceError(
            path, f"{value!r} is not a token count (an integer 0..{MAX_TOKENS})", line, column
        )
    return int(number)


def _timestamp(value: str, path: str, line: int, column: str) -> float:
    text = value.strip()
    if not text:
        raise TraceError(path, "missing value", line, column)
    try:
        return float(text) if _is_number(text) else _datetime(text).timestamp()
    except ValueError:
        raise TraceError(
            path, f"{value!r} is neither an ISO date-time nor seconds", line, column
        ) from None


def _is_number(text: str) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    if math.isnan(number) or math.isinf(number):
        raise ValueError(text)
    return True


def _datetime(text: str) -> datetime:
    """Parse an ISO date-time, cutting fractions longer than microseconds."""
    if "." in text:
        head, frac = text.rsplit(".", 1)
        digits = len(frac) - len(frac.lstrip("0123456789"))
        if digits > 6:
            text = f"{head}.{frac[:6]}{frac[digits:]}"
    stamp = datetime.fromisoformat(text)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)  # naive: read as UTC
