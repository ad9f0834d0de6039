"""ASGI entry point: HTTP through Django, WebSockets through Channels.

Heartbeats and decisions are answered by ``regions.api.fastfront.front`` in front of Django.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from dashboard.routing import websocket_urlpatterns  # noqa: E402
from regions.api.fastfront.front import LoopFront  # noqa: E402


def _leave_request_bodies_to_the_application() -> None:
    """Keep daphne (the demo's server) from parsing ``multipart/form-data`` bodies itself.

    Twisted, under daphne, parses every multipart POST body before the application sees it
    and answers one it cannot parse (an empty form, ``--boundary--``) with a bare 400: no
    body, no content type, not the API's error format. Nothing reads Twisted's parse (the
    body reaches Django whole either way), so turn it off: the API's parsers answer instead.
    Daphne loads its server before the application; other servers (uvicorn) skip this.
    """
    protocol = sys.modules.get("daphne.http_protocol")
    if protocol is None:
        return
    request_class = protocol.WebRequest
    if getattr(request_class, "_bodies_left_to_the_application", False):
        return
    parent_init = request_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        parent_init(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # twisted.web.http.Request, Twisted >= 22.8

    request_class.__init__ = __init__
    request_class._bodies_left_to_the_application = True


_leave_request_bodies_to_the_application()

application = ProtocolTypeRouter(
    {
        # Static files (API docs, dashboard) are served by the app itself: the embedded
        # mode has no web server in front, and the page must work with no internet.
        "http": LoopFront(ASGIStaticFilesHandler(django_asgi_app)),  # type: ignore[arg-type]
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# What is loaded by now lives as long as the process: keep it out of every garbage
# collection, which otherwise walks it again and again under load (p99 latency).
gc.freeze()
