"""WebSocket routes of the dashboard."""

from __future__ import annotations

from typing import Any

from django.urls import path

from dashboard.consumers import DashboardConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
]
