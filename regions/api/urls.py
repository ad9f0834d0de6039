"""The REST API under /api/v1/: each area keeps its own route module."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("", include("regions.api.config_urls")),
    path("", include("regions.api.fleet_urls")),
    path("", include("regions.api.loop_urls")),
    path("", include("regions.api.drill_urls")),
    path("", include("regions.api.alert_urls")),
]
