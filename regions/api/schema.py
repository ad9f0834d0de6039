"""OpenAPI: the bearer scheme, and the one error format documented on every operation."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import inline_serializer
from rest_framework import permissions, serializers

ERROR = inline_serializer(
    name="Error",
    fields={
        "error": serializers.CharField(
            help_text="machine-readable code: invalid, parse_error, not_authenticated, "
            "authentication_failed, permission_denied, not_found, method_not_allowed, "
            "conflict, too_large, throttled, unavailable, ..."
        ),
        "detail": serializers.CharField(help_text="what went wrong, for a human"),
        "fields": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="per input field (or query parameter), its problems",
        ),
    },
)

_DESCRIPTIONS = {
    "400": "Invalid input; `fields` names each offending field.",
    "401": "No token, or an invalid or revoked one.",
    "403": "The token's role may not do this.",
    "404": "No such object.",
    "409": "The change conflicts with stored state (in use, duplicate).",
    "413": "The body is larger than 1 MB.",
    "415": "The body is not JSON.",
    "429": "Rate limit of the token exceeded.",
    "503": "`unavailable`: a store (Redis or the database) cannot be reached; retry after "
    "`Retry-After` seconds. A decision is also refused so when no allowed capacity exists.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer"},
        "description": "seconds to wait before retrying",
    }
}
_HEADERS = {
    "401": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "`Bearer`"}},
    "429": _RETRY_AFTER,
    "503": _RETRY_AFTER,
}


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "regions.access.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (`tmk_…`, from `create_token` or POST /api/v1/tokens/) "
            "or, for heartbeats only, an agent token (`tma_…`).",
        }


class AutoSchema(SpectacularAutoSchema):
    """Add the error responses every operation can return, in the one error format."""

    def get_tags(self) -> list[str]:
        parts = [p for p in self.path.split("/") if p]
        if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
            return [parts[2]]
        tags: list[str] = super().get_tags()
        return tags

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)  # type: ignore[arg-type]
        for code in self._error_codes():
            if code in responses:
                continue
            body = self._get_response_for_code(ERROR, code, direction=direction)
            body["description"] = _DESCRIPTIONS[code]
            if code in _HEADERS:
                body["headers"] = _HEADERS[code]
            responses[code] = body
        return responses

    def _error_codes(self) -> list[str]:
        codes = ["429", "503"]
        public = all(
            p is permissions.AllowAny for p in getattr(self.view, "permission_classes", [])
        )
        if not public:
            codes += ["401", "403"]
        has_body = self.method in {"POST", "PUT", "PATCH"}
        if has_body or self._filters_query():
            codes.append("400")
        if has_body:
            codes += ["413", "415"]
        if "{" in self.path:
            codes.append("404")
        if self.method in {"POST", "PUT", "PATCH", "DELETE"}:
            codes.append("409")
        return sorted(codes)

    def _filters_query(self) -> bool:
        """Whether query parameters are validated: filters, ordering, limit/offset."""
        if self.method != "GET":
            return False
        return bool(getattr(self.view, "filter_backends", None)) or self._is_list_view()
