"""One error format for the whole API: ``{"error", "detail", "fields"}``.

A store outage (``regions.api.outage``) is a 503 ``unavailable`` with ``Retry-After`` here, in
the ASGI front of the hot paths (``regions.api.fastfront``) and for any other Django view
(``regions.middleware.ErrorFormatMiddleware``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import BadRequest, PermissionDenied, RequestDataTooBig
from django.core.exceptions import SuspiciousOperation as DjangoSuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import ProtectedError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.views.defaults import page_not_found
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from regions.api.outage import (
    OUTAGE_RETRY_AFTER_S,
    STORE_ERRORS,
    is_outage,
    note_outage,
    outage_body,
    outage_headers,
    store_of,
)
from regions.errors import DomainError
from trafficmgr.fleetfile import FleetError

__all__ = [
    "BAD_BODY_ERRORS",
    "OUTAGE_RETRY_AFTER_S",
    "STORE_ERRORS",
    "bad_body_status",
    "error_body",
    "exception_handler",
    "is_outage",
    "not_found",
    "note_outage",
    "outage_body",
    "outage_headers",
    "store_of",
]


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            # DRF keys list-item errors by index: addresses[3], like the fleet file's paths.
            if isinstance(key, int):
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors" and prefix == "":
                name = "non_field_errors"
            for k, v in _flatten(value, name).items():
                out.setdefault(k, []).extend(v)
    elif isinstance(detail, list):
        if all(not isinstance(d, dict | list) for d in detail):
            out[prefix or "non_field_errors"] = [str(d) for d in detail]
        else:
            for i, item in enumerate(detail):
                for k, v in _flatten(item, f"{prefix}[{i}]").items():
                    out.setdefault(k, []).extend(v)
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


def error_body(
    code: str, detail: str, fields: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    return {"error": code, "detail": detail, "fields": fields or {}}


# Bodies Django itself refuses while reading them (multipart, too many fields, ...).
BAD_BODY_ERRORS = (MultiPartParserError, BadRequest, DjangoSuspiciousOperation)


def bad_body_status(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and error body for a body Django refused to read (logged as Django would:
    a suspicious operation to ``django.security.<its class>``)."""
    if isinstance(exc, DjangoSuspiciousOperation):
        logging.getLogger(f"django.security.{type(exc).__name__}").error(str(exc)[:300])
    if isinstance(exc, RequestDataTooBig):
        return 413, error_body("too_large", str(exc) or "request body too large")
    return 400, error_body("bad_request", f"unreadable request body: {str(exc)[:200]}")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map every error to the one format, with the right status."""
    if is_outage(exc):
        request = context.get("request")
        note_outage(exc, getattr(request, "path", ""))
        set_rollback()
        return Response(outage_body(exc), status=503, headers=outage_headers())
    if isinstance(exc, BAD_BODY_ERRORS):
        status, body = bad_body_status(exc)
        return Response(body, status=status)
    if isinstance(exc, DomainError):  # the safety valve's UnsafePlan too: 409, its code, its plan
        body = error_body(exc.code, exc.detail, exc.fields) | exc.extra
        return Response(body, status=exc.status_code)
    if isinstance(exc, FleetError):
        return Response(error_body("invalid_fleet", str(exc), exc.as_fields()), status=400)
    if isinstance(exc, ProtectedError):
        users = sorted({str(obj) for obj in exc.protected_objects})
        more = f" and {len(users) - 20} more" if len(users) > 20 else ""
        return Response(
            error_body("in_use", f"still used by {', '.join(users[:20])}{more}"), status=409
        )
    if isinstance(exc, IntegrityError):
        # Validation catches duplicates first; this is the race between two writers.
        return Response(
            error_body("conflict", "the change conflicts with a concurrent one"), status=409
        )
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(fields)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        first = next(iter(fields.items()), ("", [""]))
        detail = f"{first[0]}: {first[1][0]}" if first[0] else "invalid input"
        response.data = error_body("invalid", detail, fields)
    elif isinstance(exc, exceptions.APIException):
        code = exc.get_codes()
        code = code if isinstance(code, str) else exc.default_code
        response.data = error_body(str(code), str(exc.detail))
        wait = getattr(exc, "wait", None)  # set by DRF on Throttled; not in its stubs
        if isinstance(exc, exceptions.Throttled) and wait is not None:
            response["Retry-After"] = str(max(1, int(wait + 0.999)))
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 in the API's error format under /api/, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            error_body("not_found", f"no such resource: {request.path}"), status=404
        )
    return page_not_found(request, exception)
