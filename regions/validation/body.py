"""A JSON body held to bounds: depth, integer size, finite numbers, no control characters."""

from __future__ import annotations

import json
import math
from typing import Any

from regions.validation.kinds import (
    CONTROL,
    MAX_DEPTH,
    MAX_INT_BITS,
    Invalid,
    _NonFinite,
)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def parse_json(body: bytes) -> Any:
    """Parse a request body; raise Invalid("body", ...) when it is not one JSON document.

    Depth and numbers are left to the schema the caller checks next (``validate``), or to
    ``check_bounds``.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("body", "not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_NonFinite, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise Invalid("body", f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise Invalid("body", f"malformed JSON: {str(exc)[:200]}") from None
    return value


def check_bounds(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Refuse, naming the path, what no JSON body of the API may hold.

    Nesting deeper than ``max_depth``, integers of more than ``MAX_INT_BITS`` bits (a float
    field would overflow converting them), non-finite numbers (``1e999``) and ``CONTROL``
    characters in strings or keys. Iterative: a hostile body cannot exhaust the stack.
    """
    _check_leaf(value, ())
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if type(item) is dict:
            pairs: Any = item.items()
        elif type(item) is list:
            pairs = enumerate(item)
        else:
            continue
        if depth > max_depth:
            raise Invalid(_path_text(path), f"nested too deeply (more than {max_depth} levels)")
        for key, child in pairs:
            if type(key) is str and (found := CONTROL.search(key)):
                shown = key[:64].encode("unicode_escape", "backslashreplace").decode("ascii")
                raise Invalid(_path_text((*path, shown)), f"key has a {_named(found[0])}")
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1, (*path, key)))
            elif kind is str or kind is int or kind is float or kind is _NonFinite:
                _check_leaf(child, (*path, key))


def _check_leaf(value: Any, path: tuple[str | int, ...]) -> None:
    kind = type(value)
    if kind is str:
        if found := CONTROL.search(value):
            raise Invalid(_path_text(path), f"{_named(found[0])} is not allowed")
    elif kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise Invalid(_path_text(path), f"integer of more than {MAX_INT_BITS} bits")
    elif kind is float:
        if not math.isfinite(value):
            raise Invalid(_path_text(path), "expected a finite number")
    elif kind is _NonFinite:
        raise Invalid(_path_text(path), f"expected a finite number, got {value.text}")


def _named(char: str) -> str:
    code = ord(char)
    what = "lone surrogate" if 0xD800 <= code <= 0xDFFF else "control character"
    return f"{what} U+{code:04X}"


def _path_text(path: tuple[str | int, ...]) -> str:
    """``("gpus", 3, "name")`` as ``gpus[3].name``; the empty path is the body."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else str(part)
    return (text if len(text) <= 120 else "…" + text[-119:]) or "body"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | _NonFinite):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__
