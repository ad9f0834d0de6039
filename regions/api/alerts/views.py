"""Alerts API: channels (admin edits, operator tests), notifications (operator acknowledges).

``/api/v1/alert-channels/`` is CRUD by name (readers below admin see a URL's host only and the
end of a routing key: they are credentials); ``POST /api/v1/alert-channels/{name}/test``
queues a test notification (202) that the alert worker sends on its next pass, so a
receiver that hangs never holds a request. ``/api/v1/notifications/`` lists what was sent,
to whom and how it went; ``POST /api/v1/notifications/{id}/acknowledge`` stops a page's
escalation.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from regions import conf
from regions.access.permissions import has_role
from regions.alerts import service
from regions.alerts.rules import EVENT_NAMES
from regions.api.fields import NameRelatedField, StrictChoiceField
from regions.api.filters import Filter
from regions.api.serializers import StrictModelSerializer
from regions.api.viewsets import ConfigViewSet, HistoryViewSet
from regions.audit.trail import current_actor
from regions.models import (
    AlertChannel,
    ChannelKind,
    Notification,
    NotificationStatus,
    Role,
    Severity,
)

MAX_EVENTS = 64


class AlertChannelSerializer(StrictModelSerializer):
    fallback = NameRelatedField(
        "channel", queryset=AlertChannel.objects.all(), required=False, allow_null=True
    )
    escalate_to = NameRelatedField(
        "channel", queryset=AlertChannel.objects.all(), required=False, allow_null=True
    )
    events = serializers.ListField(
        child=StrictChoiceField(choices=EVENT_NAMES),
        max_length=MAX_EVENTS,
        allow_null=True,
        required=False,
        help_text="event names this channel receives; null: every event",
    )

    class Meta:
        model = AlertChannel
        fields = [
            "name",
            "kind",
            "url",
            "address",
            "min_severity",
            "events",
            "enabled",
            "disabled_reason",
            "fallback",
            "escalate_to",
            "created_at",
        ]
        read_only_fields = ["disabled_reason", "created_at"]

    def validate_url(self, value: str) -> str:
        if value and _is_the_control_plane(value, self.context.get("request")):
            raise serializers.ValidationError("points at the control plane itself")
        return value

    def to_representation(self, instance: AlertChannel) -> dict[str, Any]:
        doc: dict[str, Any] = super().to_representation(instance)
        request = self.context.get("request")
        if request is not None and not has_role(request.user, Role.ADMIN):
            # A Slack or webhook URL's path and a PagerDuty routing key are credentials.
            doc["url"] = _redacted_url(doc["url"])
            if instance.kind == ChannelKind.PAGERDUTY and doc["address"]:
                doc["address"] = "…" + doc["address"][-4:]
        return doc

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("enabled") is True:  # re-enabled by an admin: the reason is history
            attrs["disabled_reason"] = ""
        return super().validate(attrs)


def _redacted_url(url: str) -> str:
    """Return ``url`` with only its scheme and host: what a non-admin reader sees."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…" if parts.netloc else ""
    except ValueError:
        return ""


def _host_port(url: str) -> tuple[str, int] | None:
    """Return the host (every loopback name as one) and port ``url`` names."""
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        default = 443 if parts.scheme == "https" else 80
        host = (parts.hostname or "").lower().rstrip(".")
        return (LOOPBACK if _is_loopback(host) else host, parts.port or default)
    except ValueError:
        return None


LOOPBACK = "loopback"


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_the_control_plane(url: str, request: Any) -> bool:
    """Tell whether ``url`` names the host and port this API answers on (or drills probe)."""
    target = _host_port(url)
    if target is None:
        return False
    selves = [conf.drill_http() or ""]
    if request is not None:
        selves.append(f"{request.scheme}://{request.get_host()}")
    return any(s and _host_port(s) == target for s in selves)


class NotificationSerializer(serializers.ModelSerializer):
    event = serializers.CharField(source="name", help_text="the event's name, e.g. region_down")
    event_id = serializers.IntegerField(allow_null=True, help_text="the stored event, if kept")
    channel = serializers.CharField(source="channel_name")

    class Meta:
        model = Notification
        fields = [
            "id",
            "event",
            "event_id",
            "channel",
            "status",
            "attempts",
            "severity",
            "region",
            "endpoint",
            "summary",
            "key",
            "at",
            "repeats",
            "last_error",
            "next_attempt_at",
            "created_at",
            "delivered_at",
            "acknowledged_at",
            "acknowledged_by",
            "escalated",
        ]
        read_only_fields = fields


@extend_schema_view(
    test=extend_schema(
        summary="Queue a test notification on the channel (sent by the alert worker)",
        request=None,
        responses={202: NotificationSerializer},
    )
)
class AlertChannelViewSet(ConfigViewSet):
    """Alert channels: where notifications go (webhook, Slack, PagerDuty, email)."""

    queryset = AlertChannel.objects.select_related("fallback", "escalate_to")
    serializer_class = AlertChannelSerializer
    query_filters = {
        "kind": Filter.of_choices("kind", ChannelKind.values),
    }
    ordering_fields = ["name", "kind", "created_at"]

    @property
    def write_role(self) -> str:  # type: ignore[override]
        return Role.OPERATOR if getattr(self, "action", None) == "test" else Role.ADMIN

    @action(detail=True, methods=["post"])
    def test(self, request: Request, name: str) -> Response:
        sent = service.test_send(self.get_object(), current_actor().name)
        return Response(NotificationSerializer(sent).data, status=status.HTTP_202_ACCEPTED)


@extend_schema_view(
    acknowledge=extend_schema(
        summary="Acknowledge a notification (and its alert's other notifications)",
        request=None,
        responses={200: NotificationSerializer, 404: OpenApiResponse(description="not found")},
    )
)
class NotificationViewSet(HistoryViewSet):
    """Notifications: each alert sent to each channel, with its delivery status."""

    queryset = Notification.objects.all()
    serializer_class = NotificationSerializer
    write_role = Role.OPERATOR
    query_filters = {
        "channel": Filter("channel_name"),
        "status": Filter.of_choices("status", NotificationStatus.values),
        "event": Filter("name"),
        "severity": Filter.of_choices("severity", Severity.values),
        "region": Filter("region"),
    }

    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str) -> Response:
        done = service.acknowledge(self.get_object(), current_actor().name)
        return Response(NotificationSerializer(done).data)
