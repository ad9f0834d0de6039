from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

# Databases refuse OFFSETs beyond their integer range.
MAX_OFFSET = 2**31 - 1
# The longest number either parameter is read from (18 digits).
MAX_WHOLE = 10**18 - 1


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=`` pages; never more than 1,000 rows per page.

    A limit above 1,000 is lowered to 1,000; a limit or offset that is not a whole
    number in range is a 400 naming it (DRF would silently use the default).
    """

    default_limit = 100
    max_limit = 1000

    def get_limit(self, request: Request) -> int:
        limit = _whole_number(request, self.limit_query_param, minimum=1)
        return self.default_limit if limit is None else min(limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return _whole_number(request, self.offset_query_param, minimum=0, maximum=MAX_OFFSET) or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """Say what the server takes: a limit of at least 1 (above ``max_limit`` lowered to
        it, not refused), an offset from 0 to ``MAX_OFFSET``."""
        limit, offset = super().get_schema_operation_parameters(view)
        limit["schema"] = {"type": "integer", "minimum": 1, "maximum": MAX_WHOLE}
        limit["description"] = (
            f"rows per page, at least 1 (default {self.default_limit}; "
            f"above {self.max_limit} taken as {self.max_limit})"
        )
        offset["schema"] = {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}
        offset["description"] = "rows to skip before the page"
        return [limit, offset]


def _whole_number(
    request: Request, name: str, *, minimum: int, maximum: int | None = None
) -> int | None:
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise ValidationError({name: ["give it once"]})
    raw = values[0].strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(MAX_WHOLE)):
        raise ValidationError({name: [f"{raw[:40]!r} is not a whole number >= {minimum}"]})
    value = int(raw)
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        raise ValidationError({name: [f"must be {bounds}"]})
    return value
