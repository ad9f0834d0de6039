"""Checking a parsed value against its schema, compiled once into fast closures."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from regions.validation.body import json_type
from regions.validation.kinds import (
    MAX_SAFE_INT,
    Field,
    Invalid,
    Kind,
    TimeReader,
    _NonFinite,
)


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
