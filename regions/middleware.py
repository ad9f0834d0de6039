"""Refuse oversized request bodies before anything parses them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

from regions.api.errors import error_body

DEFAULT_MAX_BODY_BYTES = 1_048_576  # 1 MB
_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def max_body_bytes() -> int:
    return int(getattr(settings, "DATA_UPLOAD_MAX_MEMORY_SIZE", None) or DEFAULT_MAX_BODY_BYTES)


def _too_large(limit: int) -> JsonResponse:
    return JsonResponse(
        error_body("too_large", f"request body larger than {limit} bytes"), status=413
    )


class BodySizeLimitMiddleware:
    """413, in the API's error format, for bodies over the limit (1 MB by default).

    The declared Content-Length is checked first, so a large upload is refused without
    being read; then the body is read (bounded) so a body without a trustworthy length
    is measured too.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = max_body_bytes()
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if not declared.isdigit():
            return JsonResponse(
                error_body("bad_request", f"Content-Length {declared[:40]!r} is not a number"),
                status=400,
            )
        if int(declared) > limit:
            return _too_large(limit)
        if request.method in _BODY_METHODS:
            try:
                body = request.body
            except RequestDataTooBig:
                return _too_large(limit)
            if len(body) > limit:
                return _too_large(limit)
        return self.get_response(request)
