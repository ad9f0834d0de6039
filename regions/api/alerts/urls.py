"""Routes of the alerts API: channels by name, notifications and silences by id.

The actions take an optional trailing slash (``/alert-channels/{name}/test`` as the contract
spells it, and ``.../test/``), like every other path of the API.
"""

from __future__ import annotations

from django.urls import re_path
from rest_framework.routers import SimpleRouter

from regions.api.alerts.silences import SilenceViewSet
from regions.api.alerts.views import AlertChannelViewSet, NotificationViewSet

router = SimpleRouter()
router.register("alert-channels", AlertChannelViewSet, basename="alert-channel")
router.register("notifications", NotificationViewSet, basename="notification")
router.register("silences", SilenceViewSet, basename="silence")
ACTIONS = {"alert-channel-test", "notification-acknowledge"}

urlpatterns = [
    re_path(
        r"^alert-channels/(?P<name>[^/]+)/test/?$",
        AlertChannelViewSet.as_view({"post": "test"}),
        name="alert-channel-test",
    ),
    re_path(
        r"^notifications/(?P<pk>[^/]+)/acknowledge/?$",
        NotificationViewSet.as_view({"post": "acknowledge"}),
        name="notification-acknowledge",
    ),
    *(u for u in router.urls if getattr(u, "name", None) not in ACTIONS),
]
