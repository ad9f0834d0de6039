"""WebSocket routes of the dashboard: each behind the same-origin check (``dashboard.origin``)."""

from __future__ import annotations

from typing import Any

from django.urls import path

from dashboard.consumers import DashboardConsumer
from dashboard.origin import SameOriginMiddleware

websocket_urlpatterns: list[Any] = [
    path("ws/dashboard/", SameOriginMiddleware(DashboardConsumer.as_asgi())),
]
