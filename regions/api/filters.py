"""Query-string filtering and ordering for list endpoints, strict about what it is given.

A view declares ``query_filters = {"region": Filter("region__name"), ...}``. Repeating a
parameter (``?region=a&region=b``) matches any of the values. Unknown parameters,
values outside a choice list, unparsable dates and unknown ordering fields are 400s
naming the parameter, instead of being silently ignored.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import filters
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

# Query parameters understood by pagination and content negotiation.
GENERIC_PARAMS = {"limit", "offset", "format"}
MAX_VALUES = 100
MAX_ORDERING_TERMS = 10


@dataclass(frozen=True)
class Filter:
    """One query parameter: the ORM lookup it drives and how its values are checked."""

    lookup: str
    choices: tuple[str, ...] = ()
    kind: str = "string"  # string | datetime
    description: str = ""

    @classmethod
    def of_choices(cls, lookup: str, choices: Iterable[str], description: str = "") -> Filter:
        return cls(lookup, tuple(choices), description=description)

    def parse(self, name: str, raw: str) -> Any:
        if len(raw) > 200:
            raise ValidationError({name: ["value longer than 200 characters"]})
        if "\x00" in raw:
            # PostgreSQL cannot compare against NUL; refuse it on every database alike.
            raise ValidationError({name: ["null characters are not allowed"]})
        if self.choices and raw not in self.choices:
            raise ValidationError({name: [f"{raw!r} is not one of {', '.join(self.choices)}"]})
        if self.kind == "datetime":
            return parse_instant(name, raw)
        return raw


def parse_instant(name: str, raw: str) -> dt.datetime:
    """An ISO 8601 date or date-time; naive values are taken as UTC."""
    try:
        value = parse_datetime(raw)
        if value is None and (day := parse_date(raw)) is not None:
            value = dt.datetime.combine(day, dt.time())
    except ValueError:
        value = None
    if value is None:
        raise ValidationError({name: [f"{raw!r} is not an ISO 8601 date or date-time"]})
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt.UTC)
    try:
        # Compare in UTC: PostgreSQL refuses offsets beyond ±15:59 ("-17:24" is valid ISO).
        return value.astimezone(dt.UTC)
    except (OverflowError, ValueError) as exc:
        raise ValidationError({name: [f"{raw!r} is out of range"]}) from exc


def refuse_unknown_params(request: Request, declared: set[str]) -> None:
    """Raise a 400 naming query parameters that neither filters nor pages understand."""
    known_params = declared | GENERIC_PARAMS
    unknown = sorted(set(request.query_params) - known_params)
    if unknown:
        known = ", ".join(sorted(known_params))
        raise ValidationError(
            {name[:100]: [f"unknown query parameter (known: {known})"] for name in unknown[:20]}
        )


def _backend_params(view: Any) -> set[str]:
    """The parameters of the view's ordering and search backends, if it has them."""
    params: set[str] = set()
    for backend in getattr(view, "filter_backends", []):
        if issubclass(backend, filters.OrderingFilter):
            params.add(backend.ordering_param)
        if issubclass(backend, filters.SearchFilter):
            params.add(backend.search_param)
    return params


class QueryFilter(filters.BaseFilterBackend):
    """Apply a view's ``query_filters``; refuse parameters nobody understands."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> Any:
        declared: dict[str, Filter] = getattr(view, "query_filters", {})
        refuse_unknown_params(request, set(declared) | _backend_params(view))
        for name, spec in declared.items():
            raw = request.query_params.getlist(name)
            if not raw:
                continue
            if len(raw) > MAX_VALUES:
                raise ValidationError({name: [f"at most {MAX_VALUES} values"]})
            values = [spec.parse(name, r) for r in raw]
            if spec.kind == "datetime" or len(values) == 1:
                queryset = queryset.filter(**{spec.lookup: values[-1]})
            else:
                queryset = queryset.filter(**{f"{spec.lookup}__in": values})
        return queryset

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        params = []
        for name, spec in getattr(view, "query_filters", {}).items():
            schema: dict[str, Any] = {"type": "string"}
            if spec.choices:
                schema["enum"] = list(spec.choices)
            if spec.kind == "datetime":
                schema["format"] = "date-time"
            params.append(
                {
                    "name": name,
                    "in": "query",
                    "required": False,
                    "schema": schema,
                    "description": spec.description
                    or (
                        f"only rows whose {spec.lookup.replace('__', ' ')} matches"
                        + ("" if spec.kind == "datetime" else "; repeat for any of several")
                    ),
                }
            )
        return params


class BoundedSearchFilter(filters.SearchFilter):
    """``?search=``, refusing more terms than a database expression can hold."""

    max_terms = 10

    def get_search_terms(self, request: Request) -> list[str]:
        try:
            terms: list[str] = super().get_search_terms(request)
        except ValidationError as exc:
            raise ValidationError({self.search_param: exc.detail}) from exc
        if len(terms) > self.max_terms or any(len(term) > 200 for term in terms):
            raise ValidationError(
                {self.search_param: [f"at most {self.max_terms} terms of 200 characters"]}
            )
        return terms


class StrictOrderingFilter(filters.OrderingFilter):
    """``?ordering=name,-priority``; an unknown field is a 400, not silently dropped."""

    def remove_invalid_fields(
        self,
        queryset: QuerySet[Any],
        fields: list[str],  # type: ignore[override]
        view: Any,
        request: Request,
    ) -> list[str]:
        valid = {item[0] for item in self.get_valid_fields(queryset, view, {"request": request})}
        fields = [term for term in fields if term]
        if len(fields) > MAX_ORDERING_TERMS:
            raise ValidationError(
                {self.ordering_param: [f"at most {MAX_ORDERING_TERMS} fields to order by"]}
            )
        bad = [term for term in fields if term.removeprefix("-") not in valid]
        if bad:
            raise ValidationError(
                {
                    self.ordering_param: [
                        f"cannot order by {', '.join(repr(b[:100]) for b in bad[:10])}; "
                        f"choose from {', '.join(sorted(valid))} (prefix '-' for descending)"
                    ]
                }
            )
        # A unique tiebreaker keeps limit/offset pages stable when values repeat.
        return [*fields, "pk"] if fields else fields
