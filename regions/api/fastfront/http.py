"""What Django would do to a request and its reply, done without Django for the loop front.

The front (``fastfront.front``) answers heartbeats and decisions only where Django would have
answered the same: the same allowed hosts (``ALLOWED_HOSTS``), HTTPS detection behind a proxy
(``SECURE_PROXY_SSL_HEADER``), body limit (``DATA_UPLOAD_MAX_MEMORY_SIZE``) and the headers
SecurityMiddleware and XFrameOptionsMiddleware add. Those rules are kept here, apart from the
front's own work (tokens, the fleet view, the answers), because they must track Django's and
are checked against it by the parity tests (tests/regions/loop/test_loop_front.py). A body
read here can be replayed, so that a request the front declines reaches Django whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http.request import split_domain_port, validate_host

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass
class HttpSettings:
    """The settings the front reads per request, read once (again after a settings change)."""

    max_body: int
    ssl_redirect: bool
    proxy_header: bytes | None  # SECURE_PROXY_SSL_HEADER's name as an ASGI header name
    proxy_secure: bytes
    allowed_hosts: list[str] | None  # None: USE_X_FORWARDED_HOST, so leave hosts to Django
    security: dict[bool, list[tuple[bytes, bytes]]]  # by secure: the middleware's headers
    hosts: dict[bytes, bool] = field(default_factory=dict)

    def host_allowed(self, host: bytes | None) -> bool:
        """``request.get_host()`` would not raise ``DisallowedHost``."""
        if host is None or self.allowed_hosts is None:
            return False
        allowed = self.hosts.get(host)
        if allowed is None:
            domain, _ = split_domain_port(host.decode("latin-1"))
            allowed = bool(domain) and validate_host(domain, self.allowed_hosts)
            if len(self.hosts) < 256:
                self.hosts[host] = allowed
        return allowed

    def secure(self, scope: Scope, proxied: bytes | None) -> bool:
        """``request.is_secure()``."""
        if proxied is not None:
            return proxied.split(b",", 1)[0].strip() == self.proxy_secure
        return bool(scope.get("scheme") == "https")


_http: HttpSettings | None = None


def http_settings() -> HttpSettings:
    global _http
    if _http is None:
        proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None) or ("", "")
        hosts = list(settings.ALLOWED_HOSTS)
        if settings.DEBUG and not hosts:
            hosts = [".localhost", "127.0.0.1", "[::1]"]
        _http = HttpSettings(
            max_body=int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 1_048_576),
            ssl_redirect=bool(settings.SECURE_SSL_REDIRECT),
            proxy_header=proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode() or None,
            proxy_secure=proxy[1].encode(),
            allowed_hosts=None if settings.USE_X_FORWARDED_HOST else hosts,
            security={True: _security_headers(True), False: _security_headers(False)},
        )
    return _http


@receiver(setting_changed)
def _settings_changed(**kwargs: Any) -> None:
    global _http
    _http = None


def _security_headers(secure: bool) -> list[tuple[bytes, bytes]]:
    """What SecurityMiddleware and XFrameOptionsMiddleware add to a JSON reply."""
    out = []
    if settings.X_FRAME_OPTIONS:
        out.append((b"x-frame-options", settings.X_FRAME_OPTIONS.upper().encode()))
    if secure and settings.SECURE_HSTS_SECONDS:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            hsts += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            hsts += "; preload"
        out.append((b"strict-transport-security", hsts.encode()))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        out.append((b"x-content-type-options", b"nosniff"))
    policy = settings.SECURE_REFERRER_POLICY
    if policy:
        if not isinstance(policy, str):
            policy = ",".join(policy)
        out.append((b"referrer-policy", policy.encode()))
    coop = settings.SECURE_CROSS_ORIGIN_OPENER_POLICY
    if coop:
        out.append((b"cross-origin-opener-policy", coop.encode()))
    return out


async def read_body(receive: Receive) -> tuple[list[Message], bytes | None]:
    """Read the body; None when it outgrows the limit or the client disconnects."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    size, limit = 0, http_settings().max_body
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return messages, None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return messages, b"".join(chunks)


def replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives what was read already, then reads on."""
    pending = list(messages)

    async def again() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return again
