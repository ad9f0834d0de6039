"""Routes of the drills API (``abort`` takes an optional trailing slash, like the actions)."""

from __future__ import annotations

from django.urls import path, re_path

from regions.api.drills import views as v

urlpatterns = [
    path("drills/", v.DrillListView.as_view(), name="drill-list"),
    path("drills/<int:pk>/", v.DrillDetailView.as_view(), name="drill-detail"),
    re_path(
        r"^drills/(?P<pk>[0-9]{1,18})/abort/?$", v.DrillAbortView.as_view(), name="drill-abort"
    ),
]
