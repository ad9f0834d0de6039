"""Refusals in OpenAI's error shape: ``{"error": {"message", "type", "code"}}``, one place.

Every refusal the gateway answers itself goes through ``error_response``, so clients (the
``openai`` library among them) read the same shape whatever refused them, and a 429 or 503
always carries ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from trafficmgr.gateway.http import Response
from trafficmgr.requestpath.types import ERROR_TYPES, Refusal


def error_body(status: int, code: str, message: str, param: str | None = None) -> bytes:
    """Return the JSON body of an OpenAI-shaped error."""
    error: dict[str, object] = {
        "message": message,
        "type": ERROR_TYPES.get(status, "server_error"),
        "code": code,
    }
    if param is not None:
        error["param"] = param
    return msgspec.json.encode({"error": error})


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    retry_after_s: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Build the response for a refusal."""
    out = dict(headers or {})
    if retry_after_s is None and status in (429, 503):
        retry_after_s = 1
    if retry_after_s is not None:
        out["Retry-After"] = str(max(1, retry_after_s))
    return Response(
        status=status,
        body=error_body(status, code, message, param),
        content_type="application/json",
        headers=out,
    )


def refusal_response(refusal: Refusal, headers: Mapping[str, str]) -> Response:
    """Build the response for a core refusal."""
    return error_response(
        refusal.status,
        refusal.code,
        refusal.message,
        param=refusal.param,
        retry_after_s=refusal.retry_after_s,
        headers=headers,
    )
