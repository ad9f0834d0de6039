"""The API's JSON parser: strict JSON only, and never a 500 for a hostile body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError


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
    """Refuse NaN/Infinity, duplicate keys, undecodable bytes and absurd nesting with a 400.

    DRF's parser lets a deeply nested body raise RecursionError (a 500) and silently
    keeps the last of duplicate keys.
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
            return json.loads(
                text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicate_keys
            )
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply") from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
