"""ASGI entry point: HTTP through Django, WebSockets through Channels.

Heartbeats and decisions are answered by ``regions.api.loop_front`` in front of Django.
"""

from __future__ import annotations

import gc
import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from dashboard.routing import websocket_urlpatterns  # noqa: E402
from regions.api.loop_front import LoopFront  # noqa: E402

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
