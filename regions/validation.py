"""Strict validation of JSON bodies on the control loop's hot paths, naming the bad field.

DRF serializers coerce (``"12"`` becomes 12) and cost tens of microseconds per field; a
heartbeat has up to 64 GPUs of 11 fields each. This checker takes JSON types at their word,
refuses unknown keys, NaN/Infinity (also spelled ``1e999``), duplicate keys and over-long
strings or lists, and reports the first problem as ``Invalid(path, message)`` with paths
like ``gpus[3].util_pct``.

A schema (``Kind``) is interpreted by ``_check``; ``compiled`` turns it once into closures
that take good input on a fast path and hand anything doubtful to ``_check``.

``check_bounds`` is what the API's JSON bodies are held to before they mean anything: nesting
depth, integer size, finite numbers and no control characters in strings or keys (the
configuration API's parser and the drills apply it). The hot paths' bodies (heartbeats,
decisions, completions) are checked against their schemas right after ``parse_json``, which
bounds their depth and numbers as tightly; their free-text diagnostics (an agent's error
messages) may hold control characters, which must not get a heartbeat refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

Kind = tuple[Any, ...]
TimeReader = Callable[[Any, str], float]


class Invalid(Exception):
    """A value that breaks its schema; ``field`` is its path, e.g. ``gpus[3].util_pct``.

    Paths are built on the way out of the nested checks, so valid input never pays for them.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self._parts: list[str] = [field] if field else []
        self.message = message

    def within(self, part: str) -> Invalid:
        """Prefix the path with an enclosing key (``name``) or index (``[3]``)."""
        self._parts.append(part)
        return self

    @property
    def field(self) -> str:
        text = ""
        for part in reversed(self._parts):
            text = f"{text}{part}" if part.startswith("[") or not text else f"{text}.{part}"
        return text or "body"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class Field:
    kind: Kind
    required: bool = True
    default: Any = None


class _NonFinite:
    """What ``NaN``, ``Infinity`` and ``-Infinity`` parse to, so the field can be named."""

    def __init__(self, text: str) -> None:
        self.text = text


def integer(lo: int, hi: int) -> Kind:
    return ("int", lo, hi)


def number(lo: float, hi: float) -> Kind:
    return ("num", lo, hi)


def open_number(lo: float, hi: float) -> Kind:
    """A finite number strictly between ``lo`` and ``hi`` (e.g. a duration: more than 0)."""
    return ("num_open", lo, hi)


def string(max_length: int, min_length: int = 1) -> Kind:
    return ("str", max_length, min_length)


def obj(fields: Mapping[str, Field]) -> Kind:
    return ("obj", dict(fields))


BOOL: Kind = ("bool",)
MAX_SAFE_INT = 2**53 - 1
# Bounds every JSON body is held to (``check_bounds``): the API's bodies nest four levels.
MAX_DEPTH = 32
MAX_INT_BITS = 128  # 38 decimal digits: any count, id or hash the API takes fits
# C0 controls but tab and line breaks, DEL, C1 controls but NEL, lone surrogates: what YAML
# refuses too, and what no name or message needs (and a terminal may obey).
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff]")


def histograms(max_names: int, max_bounds: int, name: Kind) -> Kind:
    """Cumulative histograms by name: ``{name: {"le": [...], "counts": [...], "count": n}}``.

    ``le`` are finite positive upper bounds, strictly ascending; ``counts`` the observations at
    or below each (non-negative integers, non-decreasing, as many as bounds); ``count`` all
    observations (the ``+Inf`` bucket), at least the last of ``counts``.
    """
    return ("histograms", max_names, max_bounds, name)


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


def validate(kind: Kind, value: Any, path: str = "", times: TimeReader | None = None) -> Any:
    """Check ``value`` against ``kind``; return it with defaults filled in.

    ``path`` names ``value`` in errors (empty: the body itself).
    """
    try:
        return compiled(kind)(value, times)
    except Invalid as exc:
        raise (exc.within(path) if path else exc) from None


Checker = Callable[[Any, TimeReader | None], Any]
_compiled: dict[int, tuple[Kind, Checker]] = {}  # by id(kind); the kind is kept, so is its id


def compiled(kind: Kind) -> Checker:
    """Return ``kind``'s checker: ``_check`` specialised once, with fast paths for good input.

    A fast path only accepts what ``_check`` accepts and returns what it returns; anything
    else goes to ``_check``, so errors (messages, paths, which one first) are its own.
    """
    found = _compiled.get(id(kind))
    if found is None:
        found = _compiled[id(kind)] = (kind, _specialise(kind))
    return found[1]


def _specialise(kind: Kind) -> Checker:
    maker = _MAKERS.get(kind[0])
    fast = maker(kind) if maker is not None else None
    return fast if fast is not None else partial(_slow, kind)


def _slow(kind: Kind, value: Any, times: TimeReader | None) -> Any:
    return _check(kind, value, times)


def _object_checker(kind: Kind) -> Checker:
    names = kind[1]
    fields = [(n, compiled(f.kind), f.required, f.default) for n, f in names.items()]

    def check(value: Any, times: TimeReader | None) -> Any:
        if type(value) is not dict or not value.keys() <= names.keys():
            return _check(kind, value, times)
        out: dict[str, Any] = {}
        for name, checker, required, default in fields:
            if name in value:
                try:
                    out[name] = checker(value[name], times)
                except Invalid as exc:
                    raise exc.within(name) from None
            elif required:
                raise Invalid(name, "this field is required")
            else:
                out[name] = list(default) if isinstance(default, list) else default
        return out

    return check


def _list_checker(kind: Kind) -> Checker:
    item, most = compiled(kind[1]), kind[2]

    def check(value: Any, times: TimeReader | None) -> Any:
        if type(value) is not list or len(value) > most:
            return _check(kind, value, times)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v, times))
            except Invalid as exc:
                raise exc.within(f"[{i}]") from None
        return out

    return check


def _nullable_checker(kind: Kind) -> Checker:
    inner = compiled(kind[1])
    return lambda v, times: None if v is None else inner(v, times)


def _number_checker(kind: Kind) -> Checker | None:
    lo, hi = kind[1], kind[2]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None  # in range would not imply finite

    def check(value: Any, times: TimeReader | None) -> Any:
        if type(value) is float and lo <= value <= hi:
            return value
        if type(value) is int and lo <= value <= hi:
            return float(value)
        return _check(kind, value, times)

    return check


def _open_number_checker(kind: Kind) -> Checker:
    lo, hi = kind[1], kind[2]

    def check(value: Any, times: TimeReader | None) -> Any:
        if type(value) is float and lo < value < hi:
            return value
        return _check(kind, value, times)

    return check


def _integer_checker(kind: Kind) -> Checker:
    lo, hi = kind[1], kind[2]
    return lambda v, t: v if type(v) is int and lo <= v <= hi else _check(kind, v, t)


def _string_checker(kind: Kind) -> Checker:
    most, least = kind[1], kind[2]
    return lambda v, t: v if type(v) is str and least <= len(v) <= most else _check(kind, v, t)


def _bool_checker(kind: Kind) -> Checker:
    return lambda v, t: v if v is True or v is False else _check(kind, v, t)


def _choice_checker(kind: Kind) -> Checker:
    choices = kind[1]
    return lambda v, t: v if type(v) is str and v in choices else _check(kind, v, t)


_MAKERS: dict[str, Callable[[Kind], Checker | None]] = {
    "obj": _object_checker,
    "list": _list_checker,
    "nullable": _nullable_checker,
    "num": _number_checker,
    "num_open": _open_number_checker,
    "int": _integer_checker,
    "str": _string_checker,
    "bool": _bool_checker,
    "choice": _choice_checker,
}


def _check(kind: Kind, value: Any, times: TimeReader | None) -> Any:
    tag = kind[0]
    if tag == "obj":
        return _object(kind[1], value, times)
    if tag == "nullable":
        return None if value is None else _check(kind[1], value, times)
    if tag == "list":
        return _list(kind, value, times)
    if tag == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            got = "a fraction" if isinstance(value, float) else json_type(value)
            raise Invalid("", f"expected an integer, got {got}")
        return _ranged(value, kind[1], kind[2])
    if tag == "num":
        number_ = _number(value)
        if not math.isfinite(number_):
            if isinstance(value, int):  # an integer literal of hundreds of digits
                raise Invalid("", f"outside {kind[1]:g}..{kind[2]:g}")
            raise Invalid("", "expected a finite number")
        return _ranged(number_, kind[1], kind[2])
    if tag == "num_open":
        return _open_ranged(value, kind[1], kind[2])
    if tag == "str":
        if not isinstance(value, str):
            raise Invalid("", f"expected a string, got {json_type(value)}")
        if not kind[2] <= len(value) <= kind[1]:
            raise Invalid("", f"{kind[2]} to {kind[1]} characters, got {len(value)}")
        return value
    if tag == "bool":
        if not isinstance(value, bool):
            raise Invalid("", f"expected true or false, got {json_type(value)}")
        return value
    if tag == "choice":
        if not isinstance(value, str) or value not in kind[1]:
            raise Invalid("", f"expected one of {', '.join(kind[1])}")
        return value
    if tag == "scalars":
        return _scalars(value, kind[1], kind[2])
    if tag == "histograms":
        return _histograms(kind, value, times)
    if tag == "time":
        if times is None:
            raise Invalid("", "no time reader")
        if isinstance(value, _NonFinite):
            raise Invalid("", f"expected a finite number, got {value.text}")
        return times(value, "")
    raise ValueError(f"unknown kind {tag!r}")


def _list(kind: Kind, value: Any, times: TimeReader | None) -> list[Any]:
    if not isinstance(value, list):
        raise Invalid("", f"expected an array, got {json_type(value)}")
    if len(value) > kind[2]:
        raise Invalid("", f"at most {kind[2]} items, got {len(value)}")
    out = []
    item = kind[1]
    for i, v in enumerate(value):
        try:
            out.append(_check(item, v, times))
        except Invalid as exc:
            raise exc.within(f"[{i}]") from None
    return out


def _number(value: Any) -> float:
    """Return a JSON number as a float (infinite past float's range); refuse anything else."""
    if isinstance(value, _NonFinite):
        raise Invalid("", f"expected a finite number, got {value.text}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid("", f"expected a number, got {json_type(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer literal of hundreds of digits
        return math.inf if value > 0 else -math.inf


def _open_ranged(value: Any, lo: float, hi: float) -> float:
    number_ = _number(value)
    if math.isnan(number_):
        raise Invalid("", "expected a finite number")
    if not lo < number_ < hi:
        raise Invalid(
            "", f"{repr(value)[:40]} is not more than {lo:,.15g} and less than {hi:,.15g}"
        )
    return number_


def _ranged(value: Any, lo: float, hi: float) -> Any:
    if not lo <= value <= hi:
        shown = repr(value) if abs(value) < 10**30 else f"a number of {len(str(abs(value)))} digits"
        raise Invalid("", f"{shown} is outside {lo:g}..{hi:g}")
    return value


def _object(fields: Mapping[str, Field], value: Any, times: TimeReader | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid("", f"expected an object, got {json_type(value)}")
    for key in value:
        if key not in fields:
            raise Invalid(key[:64], "unknown field")
    out: dict[str, Any] = {}
    for name, field in fields.items():
        if name in value:
            try:
                out[name] = _check(field.kind, value[name], times)
            except Invalid as exc:
                raise exc.within(name) from None
        elif field.required:
            raise Invalid(name, "this field is required")
        else:
            default = field.default
            out[name] = list(default) if isinstance(default, list) else default
    return out


def _scalars(value: Any, max_keys: int, max_length: int) -> dict[str, Any]:
    """A small flat object of strings, finite numbers, booleans and nulls."""
    if not isinstance(value, dict):
        raise Invalid("", f"expected an object, got {json_type(value)}")
    if len(value) > max_keys:
        raise Invalid("", f"at most {max_keys} keys, got {len(value)}")
    for key, item in value.items():
        if len(key) > 64:
            raise Invalid(key[:64], "keys are at most 64 characters")
        if isinstance(item, _NonFinite) or (isinstance(item, float) and not math.isfinite(item)):
            raise Invalid(key, "expected a finite number")
        if isinstance(item, str) and len(item) > max_length:
            raise Invalid(key, f"at most {max_length} characters")
        if not (item is None or isinstance(item, bool | int | float | str)):
            raise Invalid(key, f"expected a string, number, boolean or null, got {json_type(item)}")
    return dict(value)


_HISTOGRAM_KEYS = ("le", "counts", "count")


def _histograms(kind: Kind, value: Any, times: TimeReader | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid("", f"expected an object, got {json_type(value)}")
    most, max_bounds, name = kind[1], kind[2], kind[3]
    if len(value) > most:
        raise Invalid("", f"at most {most} models, got {len(value)}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        try:
            _check(name, key, times)
        except Invalid as exc:
            raise Invalid(key[:64], f"model name: {exc.message}") from None
        try:
            out[key] = _histogram(item, max_bounds)
        except Invalid as exc:
            raise exc.within(key) from None
    return out


def _histogram(value: Any, max_bounds: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid("", f"expected an object, got {json_type(value)}")
    for key in value:
        if key not in _HISTOGRAM_KEYS:
            raise Invalid(key[:64], "unknown field")
    for key in _HISTOGRAM_KEYS:
        if key not in value:
            raise Invalid(key, "this field is required")
    le, counts, count = value["le"], value["counts"], value["count"]
    for field, items in (("le", le), ("counts", counts)):
        if not isinstance(items, list):
            raise Invalid(field, f"expected an array, got {json_type(items)}")
        if len(items) > max_bounds:
            raise Invalid(field, f"at most {max_bounds} items, got {len(items)}")
    bounds: list[float] = []
    for i, bound in enumerate(le):
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            got = bound.text if isinstance(bound, _NonFinite) else json_type(bound)
            raise Invalid(f"[{i}]", f"expected a finite number, got {got}").within("le")
        try:
            number_ = float(bound)
        except OverflowError:
            number_ = math.inf
        if not (math.isfinite(number_) and number_ > 0):
            raise Invalid(f"[{i}]", "bounds are finite and positive").within("le")
        if bounds and number_ <= bounds[-1]:
            raise Invalid(f"[{i}]", "bounds are strictly ascending").within("le")
        bounds.append(number_)
    if len(counts) != len(bounds):
        raise Invalid("counts", f"{len(counts)} counts for {len(bounds)} bounds in le")
    last = 0
    for i, n in enumerate(counts):
        if type(n) is not int or not 0 <= n <= MAX_SAFE_INT:
            raise Invalid(f"[{i}]", "expected a non-negative integer").within("counts")
        if n < last:
            raise Invalid(f"[{i}]", "cumulative counts never decrease").within("counts")
        last = n
    if type(count) is not int or not 0 <= count <= MAX_SAFE_INT:
        raise Invalid("count", "expected a non-negative integer")
    if count < last:
        raise Invalid("count", f"{count} is below the last cumulative count {last}")
    return {"le": bounds, "counts": list(counts), "count": count}
