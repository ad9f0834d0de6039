from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=`` pages; never more than 1,000 rows per page."""

    default_limit = 100
    max_limit = 1000
