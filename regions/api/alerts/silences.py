"""Silences API: operators mute the alerts that match, until the silence expires.

``POST /api/v1/silences/`` ``{"matchers": {"region": "eu-west", "name": "endpoint_ejected"},
"expires_at": ..., "starts_at"?: ..., "comment"?: ...}``; ``GET`` lists them, each saying
whether it is ``active``; ``DELETE /api/v1/silences/{id}/`` ends one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from rest_framework import mixins, serializers, viewsets

from regions.alerts.rules import EVENT_NAMES
from regions.api.fields import StrictCharField, StrictChoiceField
from regions.api.filters import Filter, QueryFilter, StrictOrderingFilter
from regions.api.parsers import JSONParser
from regions.api.serializers import RejectUnknownFields, StrictModelSerializer
from regions.audit.trail import current_actor
from regions.models import Role, Severity, Silence

MAX_SILENCE = dt.timedelta(days=90)


class MatchersSerializer(RejectUnknownFields, serializers.Serializer):
    name = StrictChoiceField(choices=EVENT_NAMES, required=False, help_text="an event name")
    region = StrictCharField(max_length=63, required=False)
    endpoint = StrictCharField(max_length=63, required=False)
    severity = StrictChoiceField(choices=Severity.values, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                "name at least one of name, region, endpoint, severity"
            )
        return attrs


class SilenceSerializer(StrictModelSerializer):
    matchers = MatchersSerializer(help_text="alerts matching every one of these are muted")
    starts_at = serializers.DateTimeField(required=False, help_text="default: now")
    active = serializers.SerializerMethodField()

    class Meta:
        model = Silence
        fields = ["id", "matchers", "comment", "created_by", "starts_at", "expires_at", "active"]
        read_only_fields = ["id", "created_by", "active"]

    def get_active(self, silence: Silence) -> bool:
        return bool(silence.starts_at <= timezone.now() < silence.expires_at)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("starts_at", timezone.now())
        if attrs["expires_at"] - attrs["starts_at"] > MAX_SILENCE:
            raise serializers.ValidationError({"expires_at": ["at most 90 days after starts_at"]})
        attrs["created_by"] = current_actor().name[:150]
        return super().validate(attrs)


class SilenceViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Silences: viewer reads, operator creates and ends them."""

    queryset = Silence.objects.all()
    serializer_class = SilenceSerializer
    parser_classes = [JSONParser]
    filter_backends = [QueryFilter, StrictOrderingFilter]
    query_filters: dict[str, Filter] = {}
    ordering_fields = ["expires_at", "starts_at", "id"]
    ordering = ["-expires_at", "-id"]
    read_role = Role.VIEWER
    write_role = Role.OPERATOR
