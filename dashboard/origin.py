"""The dashboard's WebSocket handshake must come from the dashboard itself: scheme, host, port.

Browsers send the session cookie with a WebSocket handshake whatever page opens it, so a page
elsewhere could read the dashboard as the signed-in user (cross-site WebSocket hijacking).
Channels' ``AllowedHostsOriginValidator`` (``trafficmgr/asgi.py``) compares only the Origin's
host with ``ALLOWED_HOSTS``: ``Origin: http://127.0.0.1:1`` passed with a viewer's cookie, so
any other program or page served on the same host could. Here the Origin must be exactly the
origin the socket was opened on: the scheme that goes with ``ws``/``wss`` (``https`` also when
``SECURE_PROXY_SSL_HEADER`` says a TLS proxy is in front, as Django's own ``is_secure``), the
Host header's name and port (default ports made explicit), or be listed in
``CSRF_TRUSTED_ORIGINS`` (``https://*.example.com`` covers subdomains), as Django's CSRF check
wants of unsafe requests. A refused handshake is closed before it is accepted (HTTP 403).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host (lower case, IPv6 without brackets), port


def parse_origin(text: str) -> Origin | None:
    """Return an origin's (scheme, host, port), or None when it is not an http(s) origin."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:  # a port out of range or not a number
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin1")
    return None


def served_scheme(scope: dict[str, Any]) -> str:
    """``https`` when the socket is ``wss`` or a trusted proxy says it terminated TLS."""
    if scope.get("scheme") == "wss":
        return "https"
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, secure = proxy
        meta = name.lower().removeprefix("http_").replace("_", "-").encode("latin1")
        value = header(scope, meta)
        if value is not None and value.split(",")[0].strip() == secure:
            return "https"
    return "http"


def served_origin(scope: dict[str, Any]) -> Origin | None:
    """The origin the socket was opened on: its scheme and the Host header (else the server)."""
    scheme = served_scheme(scope)
    host = header(scope, b"host")
    if host is None:
        server = scope.get("server")
        if not server or server[0] is None:
            return None
        host = f"[{server[0]}]:{server[1]}" if ":" in str(server[0]) else f"{server[0]}:{server[1]}"
    return parse_origin(f"{scheme}://{host}")


def trusted(origin: Origin, patterns: Iterable[str]) -> bool:
    """Tell whether ``origin`` is one of CSRF_TRUSTED_ORIGINS (``*.`` matches subdomains)."""
    scheme, host, port = origin
    for pattern in patterns:
        wildcard = "://*." in pattern
        allowed = parse_origin(pattern.replace("://*.", "://", 1))
        if allowed is None or allowed[0] != scheme or allowed[2] != port:
            continue
        if host == allowed[1] or (wildcard and host.endswith(f".{allowed[1]}")):
            return True
    return False


def same_origin(scope: dict[str, Any]) -> bool:
    """Tell whether a handshake's Origin is the dashboard's own (or a trusted one)."""
    text = header(scope, b"origin")
    origin = parse_origin(text) if text is not None else None
    if origin is None:
        return False
    return origin == served_origin(scope) or trusted(
        origin, getattr(settings, "CSRF_TRUSTED_ORIGINS", ())
    )


class SameOriginMiddleware:
    """Refuse WebSocket handshakes from any other origin (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope.get("type") == "websocket" and not same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)
