"""The Django admin: configuration editable, history read-only, token hashes never shown."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from regions.models import (
    AgentToken,
    AlertChannel,
    ApiToken,
    AuditLog,
    Drill,
    DrillReport,
    Endpoint,
    Event,
    FailoverPolicy,
    FleetSettings,
    GpuProfile,
    Notification,
    Region,
    ResidencyRule,
    RoutingTableVersion,
    Silence,
)

admin.site.site_header = "trafficmgr administration"
admin.site.site_title = "trafficmgr"


class EndpointInline(admin.TabularInline):
    model = Endpoint
    extra = 0
    fields = ("name", "address", "gpu", "gpus", "model_names", "weight", "admin_state")
    show_change_link = True


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "country",
        "continent",
        "priority",
        "weight",
        "admin_state",
        "failover_paused",
        "endpoint_count",
    )
    list_filter = ("admin_state", "country", "failover_paused")
    search_fields = ("name", "country")
    readonly_fields = ("created_at", "updated_at")
    inlines = [EndpointInline]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("endpoints")

    @admin.display(description="endpoints")
    def endpoint_count(self, obj: Region) -> int:
        return len(obj.endpoints.all())


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ("name", "region", "address", "gpu", "gpus", "weight", "admin_state")
    list_filter = ("region", "admin_state", "gpu")
    search_fields = ("name", "address", "region__name")
    list_select_related = ("region", "gpu")
    readonly_fields = ("created_at", "updated_at")


@admin.register(GpuProfile)
class GpuProfileAdmin(admin.ModelAdmin):
    list_display = ("name", "prefill_tokens_per_s", "decode_tokens_per_s", "max_concurrency")
    search_fields = ("name",)


@admin.register(ResidencyRule)
class ResidencyRuleAdmin(admin.ModelAdmin):
    list_display = ("name", "mode", "countries", "continents", "region_names")
    list_filter = ("mode", "regions")
    search_fields = ("name",)
    filter_horizontal = ("regions",)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("regions")

    @admin.display(description="allowed regions")
    def region_names(self, obj: ResidencyRule) -> str:
        return ", ".join(r.name for r in obj.regions.all())


@admin.register(FailoverPolicy)
class FailoverPolicyAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "heartbeat_interval_s",
        "miss_threshold",
        "hold_down_s",
        "slow_start_s",
        "all_down",
    )


@admin.register(FleetSettings)
class FleetSettingsAdmin(admin.ModelAdmin):
    list_display = ("zone", "ttl", "unlocated_clients", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not FleetSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TokenAdmin(admin.ModelAdmin):
    """Tokens are created by ``create_token`` or the API; here they can only be revoked."""

    exclude = ("key_hash",)
    readonly_fields = ("name", "prefix", "created_at", "created_by", "last_used_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "created_by")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(boolean=True, description="active")
    def is_active(self, obj: Any) -> bool:
        return bool(obj.active)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])  # per row, so each revoke is audited
            count += 1
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(ApiToken)
class ApiTokenAdmin(TokenAdmin):
    list_display = (
        "name",
        "prefix",
        "role",
        "is_active",
        "created_by",
        "created_at",
        "last_used_at",
    )
    list_filter = ("role", "revoked_at")  # type: ignore[assignment]
    readonly_fields = (*TokenAdmin.readonly_fields, "role")  # type: ignore[assignment]


@admin.register(AgentToken)
class AgentTokenAdmin(TokenAdmin):
    list_display = (
        "name",
        "prefix",
        "region",
        "is_active",
        "created_by",
        "created_at",
        "last_used_at",
    )
    list_filter = ("region", "revoked_at")  # type: ignore[assignment]
    readonly_fields = (*TokenAdmin.readonly_fields, "region")  # type: ignore[assignment]
    filter_horizontal = ("endpoints",)


class ReadOnlyAdmin(admin.ModelAdmin):
    """History: viewable, never added to, changed or deleted from the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "actor_type", "action", "object_type", "object_repr", "source")
    list_filter = ("action", "actor_type", "object_type")
    search_fields = ("actor", "object_repr", "object_id")
    date_hierarchy = "at"


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("at", "kind", "severity", "region", "endpoint", "message")
    list_filter = ("kind", "severity", "region")
    search_fields = ("message", "region", "endpoint")
    date_hierarchy = "at"


@admin.register(RoutingTableVersion)
class RoutingTableVersionAdmin(ReadOnlyAdmin):
    list_display = ("version", "generated_at", "reason")
    search_fields = ("version", "reason")
    date_hierarchy = "generated_at"


class DrillReportInline(admin.StackedInline):
    model = DrillReport
    extra = 0
    can_delete = False
    readonly_fields = ("report", "created_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Drill)
class DrillAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "target", "status", "duration_s", "created_by", "created_at")
    list_filter = ("kind", "status")
    search_fields = ("target", "created_by")
    inlines = [DrillReportInline]


@admin.register(AlertChannel)
class AlertChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "min_severity", "enabled", "disabled_reason")
    list_filter = ("kind", "enabled")
    search_fields = ("name",)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "name", "channel_name", "severity", "status", "attempts")
    list_filter = ("status", "severity", "name")
    search_fields = ("channel_name", "region", "endpoint", "summary")
    date_hierarchy = "created_at"


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    """Silences mute the alerts their matchers match until they expire."""

    list_display = ("matchers", "starts_at", "expires_at", "created_by", "comment")
    readonly_fields = ("created_by",)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = str(request.user)[:150]
        super().save_model(request, obj, form, change)
