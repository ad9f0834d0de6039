"""Routes of fleet apply and export."""

from __future__ import annotations

from django.urls import path

from regions.api.fleet.views import FleetApplyView, FleetExportView

urlpatterns = [
    path("fleet/apply", FleetApplyView.as_view(), name="fleet-apply"),
    path("fleet/export", FleetExportView.as_view(), name="fleet-export"),
]
