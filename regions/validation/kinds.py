"""The schemas a body is checked against (``Kind``), and the error naming the bad field."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
