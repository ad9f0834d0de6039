"""Strict validation of JSON bodies on the control loop's hot paths, naming the bad field.

DRF serializers coerce (``"12"`` becomes 12) and cost tens of microseconds per field; a
heartbeat has up to 64 GPUs of 11 fields each. This checker takes JSON types at their word,
refuses unknown keys, NaN/Infinity (also spelled ``1e999``), duplicate keys and over-long
strings or lists, and reports the first problem as ``Invalid(path, message)`` with paths
like ``gpus[3].util_pct``.

- ``kinds``: the schemas (``Kind``: ``integer``, ``number``, ``string``, ``obj``, ...) and
  ``Invalid``;
- ``body``: ``parse_json`` and ``check_bounds``, what every API body is held to before it
  means anything (nesting depth, integer size, finite numbers, no control characters in
  strings or keys; an agent's free-text diagnostics may hold control characters, which must
  not get a heartbeat refused);
- ``check``: ``validate`` against a schema, and ``compiled``, which turns a schema once into
  closures that take good input on a fast path and hand anything doubtful to ``_check``.
"""

from __future__ import annotations

from regions.validation.body import check_bounds, json_type, parse_json
from regions.validation.check import _check, compiled, validate
from regions.validation.kinds import (
    BOOL,
    CONTROL,
    MAX_DEPTH,
    MAX_INT_BITS,
    MAX_SAFE_INT,
    Field,
    Invalid,
    Kind,
    TimeReader,
    histograms,
    integer,
    number,
    obj,
    open_number,
    string,
)

__all__ = [
    "BOOL",
    "CONTROL",
    "MAX_DEPTH",
    "MAX_INT_BITS",
    "MAX_SAFE_INT",
    "Field",
    "Invalid",
    "Kind",
    "TimeReader",
    "_check",
    "check_bounds",
    "compiled",
    "histograms",
    "integer",
    "json_type",
    "number",
    "obj",
    "open_number",
    "parse_json",
    "string",
    "validate",
]
