"""The REST API under /api/v1/: each area keeps its own route module."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("", include("regions.api.config.urls")),
    path("", include("regions.api.fleet.urls")),
    path("", include("regions.api.loop.urls")),
    path("", include("regions.api.drills.urls")),
    path("", include("regions.api.alerts.urls")),
]
