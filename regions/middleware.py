"""The edges of every Django request: oversized bodies refused before anything parses them,
and no request answered with Django's HTML 500 (or its traceback page)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse, JsonResponse

from regions.api.errors import (
    BAD_BODY_ERRORS,
    OUTAGE_RETRY_AFTER_S,
    bad_body_status,
    error_body,
    is_outage,
    note_outage,
    outage_body,
    store_of,
)

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


# --- the last resort --------------------------------------------------------------------------

_FAILURE = "_trafficmgr_failure"  # the exception Django turned into a 500, on the request
OUTAGE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Temporarily unavailable</title></head>
<body><h1>Temporarily unavailable</h1>
<p>trafficmgr cannot reach {store} right now; try again in {wait} seconds.</p>
</body></html>
"""


def wants_page(request: HttpRequest) -> bool:
    """A browser asking for a page (HTML), not a client of the API (the one error format)."""
    if request.path.startswith("/api/v1/") or request.path == "/api/schema/":
        return False
    return "text/html" in request.META.get("HTTP_ACCEPT", "")


def outage_response(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """503 with Retry-After: the error format, or a short page for a browser."""
    note_outage(exc, request.path)
    response: HttpResponse
    if wants_page(request):
        page = OUTAGE_PAGE.format(store=store_of(exc), wait=OUTAGE_RETRY_AFTER_S)
        response = HttpResponse(page, status=503, content_type="text/html; charset=utf-8")
    else:
        response = JsonResponse(outage_body(exc), status=503)
    response["Retry-After"] = str(OUTAGE_RETRY_AFTER_S)
    return response


def _remember_failure(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Note on the request which exception Django is turning into a 500 (for the rewrite)."""
    if request is not None:
        setattr(request, _FAILURE, sys.exc_info()[1])


got_request_exception.connect(_remember_failure, dispatch_uid="regions.middleware.failure")


class ErrorFormatMiddleware:
    """Last resort, outermost: no answer is Django's HTML 500 or its traceback page.

    - a store that cannot be reached (Redis, the database) is a 503 with ``Retry-After``: in
      the error format, or a short HTML page for a browser asking for a page (dashboard, admin);
    - a body Django refuses to read (malformed multipart, too many fields) is a 400 (413 when
      too large) in the error format;
    - any other unexpected error is still logged by Django as a 500, and answered in the
      error format unless a browser asked for a page (Django's plain 500 page then, which
      shows no traceback unless ``DEBUG``).

    Errors raised by views come to ``process_exception``. Those raised by other middleware
    (the session middleware saving a session, a lazy user loaded from the database) are turned
    into a 500 at their own layer; ``got_request_exception`` tells which exception it was, and
    ``__call__`` restyles that 500 in place, keeping the headers the other layers set.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 500 or response.streaming or _is_json(response):
            return response
        failure = getattr(request, _FAILURE, None)
        if failure is not None and is_outage(failure):
            replacement = outage_response(request, failure)
        elif response.status_code == 500 and not wants_page(request):
            replacement = JsonResponse(
                error_body("server_error", "internal error, see the log"), status=500
            )
        else:
            return response
        _restyle(response, replacement)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_outage(exception):
            return outage_response(request, exception)
        if isinstance(exception, BAD_BODY_ERRORS) and not wants_page(request):
            status, body = bad_body_status(exception)
            return JsonResponse(body, status=status)
        return None  # Django logs it and answers 500; __call__ restyles that answer


def _is_json(response: HttpResponse) -> bool:
    return str(response.get("Content-Type", "")).startswith("application/json")


def _restyle(response: HttpResponse, replacement: HttpResponse) -> None:
    """Give ``response`` the status, body and type of ``replacement``; keep its other headers."""
    response.status_code = replacement.status_code
    response.reason_phrase = replacement.reason_phrase
    response.content = replacement.content
    response["Content-Type"] = replacement["Content-Type"]
    if response.has_header("Content-Length"):
        response["Content-Length"] = str(len(response.content))
    if replacement.has_header("Retry-After"):
        response["Retry-After"] = replacement["Retry-After"]
