"""Serializer fields that take JSON types at their word: no silent coercion."""

from __future__ import annotations

import math
from typing import Any

from rest_framework import serializers

# Caps on list fields, so a 10,000-item list is refused before it is looked at.
MAX_ADDRESSES = 64
MAX_MODELS = 256
MAX_COUNTRIES = 300
MAX_CONTINENTS = 16
MAX_REGIONS = 500


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class StrictCharField(serializers.CharField):
    """A string, and only a string (DRF would turn 12 into "12")."""

    default_error_messages = {"type": "expected a string, got {kind}"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("type", kind=_json_type(data))
        return str(super().to_internal_value(data))


class CodeField(StrictCharField):
    """A country or continent code, upper-cased as the fleet file does (``ie`` → ``IE``)."""

    def to_internal_value(self, data: Any) -> str:
        return super().to_internal_value(data).upper()


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: not a boolean, a string or a fraction."""

    default_error_messages = {"type": "expected an integer, got {kind}"}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            kind = "a fraction" if isinstance(data, float) else _json_type(data)
            self.fail("type", kind=kind)
        return int(super().to_internal_value(data))


class StrictFloatField(serializers.FloatField):
    """A finite JSON number (NaN and ±Infinity refused, also when spelled 1e999)."""

    default_error_messages = {
        "type": "expected a number, got {kind}",
        "finite": "expected a finite number",
    }

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("type", kind=_json_type(data))
        try:
            value = float(data)
        except OverflowError:
            self.fail("finite")
        if not math.isfinite(value):
            self.fail("finite")
        return float(super().to_internal_value(value))


class StrictBooleanField(serializers.BooleanField):
    """true or false; not "yes", 1 or "on"."""

    default_error_messages = {"type": "expected true or false, got {kind}"}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("type", kind=_json_type(data))
        return data


class StrictChoiceField(serializers.ChoiceField):
    """One of the choices, given as a string."""

    default_error_messages = {"type": "expected a string, got {kind}"}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("type", kind=_json_type(data))
        return super().to_internal_value(data)


class NameRelatedField(serializers.SlugRelatedField):
    """A related object named by its ``name``; an unknown name is named back."""

    default_error_messages = {
        "does_not_exist": "unknown {label} {value}",
        "type": "expected the {label}'s name as a string, got {kind}",
    }

    def __init__(self, label: str, **kwargs: Any) -> None:
        self.object_label = label
        super().__init__(slug_field="name", **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("type", label=self.object_label, kind=_json_type(data))
        try:
            return self.get_queryset().get(name=data)  # type: ignore[union-attr]
        except (TypeError, ValueError, self.get_queryset().model.DoesNotExist):  # type: ignore[union-attr]
            self.fail("does_not_exist", label=self.object_label, value=repr(data[:100]))


class BoundedListField(serializers.ListField):
    """A list whose length is checked before its items are."""

    default_error_messages = {"too_long": "at most {max_length} items, got {count}"}

    def to_internal_value(self, data: Any) -> list[Any]:
        if isinstance(data, list) and self.max_length is not None and len(data) > self.max_length:
            self.fail("too_long", max_length=self.max_length, count=len(data))
        return list(super().to_internal_value(data))


def string_list(max_length: int, *, item_max_length: int = 63, **kwargs: Any) -> BoundedListField:
    """A bounded list of non-blank strings."""
    return BoundedListField(
        child=StrictCharField(max_length=item_max_length), max_length=max_length, **kwargs
    )


class UniqueListField(BoundedListField):
    """A bounded list with repeated items dropped, first occurrence kept."""

    def to_internal_value(self, data: Any) -> list[Any]:
        return list(dict.fromkeys(super().to_internal_value(data)))


def code_list(max_length: int, **kwargs: Any) -> BoundedListField:
    """A bounded list of country or continent codes, upper-cased, duplicates dropped."""
    return UniqueListField(child=CodeField(max_length=2), max_length=max_length, **kwargs)
