"""The API's JSON parser: strict JSON only, and never a 500 for a hostile body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.request import Request

from regions.validation import MAX_DEPTH, Invalid, check_bounds


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"Out of range float values are not JSON compliant: {name!r}")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:100]!r}")
        out[key] = value
    return out


class JSONParser(parsers.JSONParser):
    """Refuse NaN/Infinity, duplicate keys, undecodable bytes and what ``check_bounds``
    refuses (nesting deeper than ``MAX_DEPTH``, integers a float field cannot take, ``1e999``,
    control characters) with a 400 in the error format, naming the field where there is one.

    DRF's parser lets a deeply nested body raise RecursionError (a 500), silently keeps the
    last of duplicate keys, and hands on integers whose conversion to float overflows (a 500).
    """

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - body is not {encoding}: {exc}") from exc
        try:
            value = json.loads(
                text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicate_keys
            )
        except RecursionError as exc:
            deep = f"nested too deeply (more than {MAX_DEPTH} levels)"
            raise ParseError(f"JSON parse error - {deep}") from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {str(exc)[:200]}") from exc
        try:
            check_bounds(value)
        except Invalid as exc:
            raise ValidationError({exc.field: [exc.message]}) from None
        return value


TRUE = {"1", "true", "yes", "on"}
FALSE = {"", "0", "false", "no", "off"}


def flag(request: Request, name: str) -> bool:
    """A boolean query parameter (``1``/``0``, ``true``/``false``, ...); anything else is a 400
    naming it: a mistyped ``dry_run`` must not apply the change."""
    raw = str(request.query_params.get(name, "")).strip().lower()
    if raw in TRUE:
        return True
    if raw in FALSE:
        return False
    raise ValidationError({name: [f"{raw[:40]!r} is not a boolean (use 1 or 0)"]})
