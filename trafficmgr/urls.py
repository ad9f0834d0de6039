"""URL map: the REST API under /api/v1/, its schema and docs, health, admin, dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("regions.urls")),
    path("", include("dashboard.urls")),
]

handler404 = "regions.api.errors.not_found"
