"""Serializers of the configuration API: strict about input, and agreeing with the admin.

Every model serializer refuses unknown fields (naming them), takes JSON types at their
word (see ``fields.py``) and runs the model's ``full_clean()``, so the invariants in
``Model.clean()`` hold whichever way a row is written. Related objects are named by
their ``name``, never by a database id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models, transaction
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from regions.access.issue import TOKEN_ROLES
from regions.api.fields import (
    MAX_ADDRESSES,
    MAX_CONTINENTS,
    MAX_COUNTRIES,
    MAX_MODELS,
    MAX_REGIONS,
    CodeField,
    NameRelatedField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    code_list,
    string_list,
)
from regions.models import (
    AgentToken,
    ApiToken,
    AuditLog,
    Endpoint,
    Event,
    FailoverPolicy,
    GpuProfile,
    Region,
    ResidencyRule,
)
from trafficmgr.routing.countrysets import SET_NAMES


class RejectUnknownFields:
    """Name every body field the serializer does not know, instead of ignoring it."""

    fields: Any

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            # Read-only fields (id, created_at, ...) are accepted and ignored, so that
            # what a GET returns can be PUT back.
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {name[:100]: ["unknown field"] for name in unknown[:20]}
                )
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictModelSerializer(RejectUnknownFields, serializers.ModelSerializer):
    """Refuse unknown fields, coerce nothing, and run ``Model.full_clean()``."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.IntegerField: StrictIntegerField,
        models.PositiveIntegerField: StrictIntegerField,
        models.FloatField: StrictFloatField,
        models.BooleanField: StrictBooleanField,
    }
    serializer_choice_field = StrictChoiceField

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        self._full_clean(attrs)
        return attrs

    def _full_clean(self, attrs: dict[str, Any]) -> None:
        """Run the model's own validation on the row as it would be saved."""
        model: type[models.Model] = self.Meta.model
        concrete = model._meta.concrete_fields
        candidate = model()
        if self.instance is not None:
            for field in concrete:
                setattr(candidate, field.attname, getattr(self.instance, field.attname))
            candidate._state.adding = False
            candidate._state.db = self.instance._state.db
        names = {f.name for f in concrete}
        for key, value in attrs.items():
            if key in names:
                setattr(candidate, key, value)
        try:
            candidate.full_clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(self._field_errors(exc)) from exc

    def _field_errors(self, exc: DjangoValidationError) -> dict[str, list[str]]:
        by_source = {f.source: name for name, f in self.fields.items()}
        out: dict[str, list[str]] = {}
        for key, messages in exc.message_dict.items():
            name = "non_field_errors" if key == NON_FIELD_ERRORS else by_source.get(key, key)
            out.setdefault(name, []).extend(messages)
        return out


class GpuProfileSerializer(StrictModelSerializer):
    class Meta:
        model = GpuProfile
        fields = ["name", "prefill_tokens_per_s", "decode_tokens_per_s", "max_concurrency"]


class RegionSerializer(StrictModelSerializer):
    country = CodeField(max_length=2, help_text="ISO 3166-1 alpha-2 code of its location")
    continent = serializers.CharField(read_only=True)
    addresses = string_list(
        MAX_ADDRESSES,
        item_max_length=45,
        allow_empty=False,
        help_text="ingress IPv4/IPv6 addresses returned in DNS answers",
    )

    class Meta:
        model = Region
        fields = [
            "id",
            "name",
            "country",
            "continent",
            "lat",
            "lon",
            "addresses",
            "priority",
            "weight",
            "admin_state",
            "failover_paused",
            "created_at",
            "updated_at",
        ]


class EndpointSerializer(StrictModelSerializer):
    region = NameRelatedField(
        "region", queryset=Region.objects.all(), help_text="name of the region it is in"
    )
    gpu = NameRelatedField(
        "GPU profile", queryset=GpuProfile.objects.all(), help_text="name of a GPU profile"
    )
    models = string_list(
        MAX_MODELS,
        source="model_names",
        allow_empty=False,
        help_text="names of the models this endpoint serves",
    )

    class Meta:
        model = Endpoint
        fields = [
            "id",
            "name",
            "region",
            "address",
            "gpu",
            "gpus",
            "models",
            "weight",
            "admin_state",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {"address": {"help_text": "host:port, [IPv6]:port or an IP address"}}


@extend_schema_field(
    {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_REGIONS}
)
class RegionNamesField(serializers.Field):
    """A list of region names, resolved in one query; unknown names are named back."""

    default_error_messages = {
        "not_a_list": "expected a list of region names",
        "empty": "name at least one region",
        "too_long": "at most {max_length} regions, got {count}",
        "unknown": "unknown region(s): {names}",
    }

    def to_internal_value(self, data: Any) -> list[Region]:
        if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
            self.fail("not_a_list")
        if not data:
            self.fail("empty")
        if len(data) > MAX_REGIONS:
            self.fail("too_long", max_length=MAX_REGIONS, count=len(data))
        # Only well-formed names can exist; the rest (NUL bytes included) are unknown unasked.
        plausible = {n for n in data if n and all(c.isalnum() or c in "-_." for c in n)}
        found = {r.name: r for r in Region.objects.filter(name__in=plausible)}
        if missing := [n for n in dict.fromkeys(data) if n not in found]:
            self.fail("unknown", names=", ".join(repr(n[:63]) for n in missing[:20]))
        return [found[n] for n in dict.fromkeys(data)]

    def to_representation(self, value: Any) -> list[str]:
        return sorted(r.name for r in value.all())


class ResidencyRuleSerializer(StrictModelSerializer):
    countries = code_list(
        MAX_COUNTRIES, required=False, help_text="client countries, ISO 3166-1 alpha-2"
    )
    continents = code_list(
        MAX_CONTINENTS, required=False, help_text="client continents: AF AN AS EU NA OC SA"
    )
    sets = string_list(
        len(SET_NAMES),
        item_max_length=32,
        required=False,
        help_text=f"client country sets: {' '.join(SET_NAMES)}",
    )
    regions = RegionNamesField(help_text="names of the regions these clients may use")

    class Meta:
        model = ResidencyRule
        fields = [
            "id",
            "name",
            "countries",
            "continents",
            "sets",
            "regions",
            "mode",
            "created_at",
            "updated_at",
        ]

    def create(self, validated_data: dict[str, Any]) -> ResidencyRule:
        regions = validated_data.pop("regions")
        with transaction.atomic():
            rule = ResidencyRule.objects.create(**validated_data)
            rule.regions.set(regions)
        return rule

    def update(self, instance: ResidencyRule, validated_data: dict[str, Any]) -> ResidencyRule:
        regions = validated_data.pop("regions", None)
        with transaction.atomic():
            for key, value in validated_data.items():
                setattr(instance, key, value)
            instance.save()
            if regions is not None:
                instance.regions.set(regions)
        return instance


class FailoverPolicySerializer(StrictModelSerializer):
    class Meta:
        model = FailoverPolicy
        fields = [
            "id",
            "name",
            "heartbeat_interval_s",
            "miss_threshold",
            "up_threshold",
            "down_threshold",
            "hold_down_s",
            "slow_start_s",
            "spillover_headroom",
            "all_down",
            "max_shift_per_tick",
            "updated_at",
        ]


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["id", "at", "kind", "severity", "region", "endpoint", "message", "data"]
        read_only_fields = fields


class AuditLogSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditLog
        fields = [
            "id",
            "at",
            "actor",
            "actor_type",
            "source",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
        ]
        read_only_fields = fields


def token_id(token: ApiToken | AgentToken) -> str:
    """The public id of a token: ``api-<n>`` or ``agent-<n>`` (two tables, one list)."""
    return f"{'agent' if isinstance(token, AgentToken) else 'api'}-{token.pk}"


class TokenSerializer(serializers.Serializer):
    """A token as listed: never its secret or hash."""

    id = serializers.SerializerMethodField(help_text="`api-<n>` or `agent-<n>`")
    name = serializers.CharField(read_only=True)
    prefix = serializers.CharField(read_only=True, help_text="first characters of the secret")
    role = serializers.SerializerMethodField()
    region = serializers.SerializerMethodField(help_text="agent tokens: the region it reports for")
    created_at = serializers.DateTimeField(read_only=True)
    created_by = serializers.CharField(read_only=True)
    last_used_at = serializers.DateTimeField(read_only=True, allow_null=True)
    revoked_at = serializers.DateTimeField(read_only=True, allow_null=True)
    active = serializers.BooleanField(read_only=True)

    def get_id(self, token: ApiToken | AgentToken) -> str:
        return token_id(token)

    def get_role(self, token: ApiToken | AgentToken) -> str:
        return "agent" if isinstance(token, AgentToken) else str(token.role)

    def get_region(self, token: ApiToken | AgentToken) -> str | None:
        region = getattr(token, "region", None)
        return region.name if region is not None else None


class TokenCreatedSerializer(TokenSerializer):
    secret = serializers.CharField(read_only=True, help_text="shown this once; store it now")


class TokenCreateSerializer(RejectUnknownFields, serializers.Serializer):
    name = StrictCharField(max_length=100, help_text="any text, to recognise the token by")
    role = StrictChoiceField(choices=TOKEN_ROLES)
    region = StrictCharField(
        max_length=63,
        required=False,
        allow_null=True,
        help_text="required for role agent: the region it reports for",
    )
