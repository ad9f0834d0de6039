"""Fleet configuration: regions, endpoints, GPU profiles, residency rules, failover policies."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from trafficmgr.fleetfile.read import FAILOVER_RANGES, parse_address
from trafficmgr.routing.countries import CONTINENTS, continent_of
from trafficmgr.routing.countrysets import COUNTRY_SETS, SET_NAMES
from trafficmgr.routing.types import UnlocatedClients

NAME_VALIDATOR_MSG = "may only hold letters, digits, '-', '_' and '.'"


def validate_name(value: str) -> None:
    if not value or not all(c.isalnum() or c in "-_." for c in value):
        raise ValidationError(f"{value!r} {NAME_VALIDATOR_MSG}")


def validate_unlocated(value: str) -> None:
    """Refuse what ``UnlocatedClients.parse`` refuses, with its message."""
    try:
        UnlocatedClients.parse(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def validate_country(value: str) -> None:
    if continent_of(value or "") is None or value != value.upper():
        raise ValidationError(f"{value!r} is not an upper-case ISO 3166-1 alpha-2 code")


class AdminState(models.TextChoices):
    ACTIVE = "active"
    DRAINED = "drained"
    DISABLED = "disabled"


class FleetSettings(models.Model):
    """Fleet-wide values of the fleet file: zone, TTL, client mix, objective, unlocated clients."""

    zone = models.CharField(max_length=253, default="infer.example.test")
    ttl = models.PositiveIntegerField(default=10)
    clients = models.JSONField(default=list, blank=True)
    # The fleet file's ``slo`` as it writes it ({} = the engine's default objective).
    slo = models.JSONField(default=dict, blank=True)
    # What clients that cannot be located get (the fleet file's ``unlocated_clients``).
    unlocated_clients = models.CharField(
        max_length=80,
        default="unrestricted",
        validators=[validate_unlocated],
        help_text="unrestricted, deny, rule:NAME (a residency rule) or zone:CODE",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "fleet settings"

    def __str__(self) -> str:
        return self.zone

    @classmethod
    def current(cls) -> FleetSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class GpuProfile(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[validate_name])
    prefill_tokens_per_s = models.FloatField()
    decode_tokens_per_s = models.FloatField()
    max_concurrency = models.PositiveIntegerField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.prefill_tokens_per_s is not None and self.prefill_tokens_per_s <= 0:
            errors["prefill_tokens_per_s"] = "must be > 0"
        if self.decode_tokens_per_s is not None and self.decode_tokens_per_s <= 0:
            errors["decode_tokens_per_s"] = "must be > 0"
        if self.max_concurrency is not None and self.max_concurrency < 1:
            errors["max_concurrency"] = "must be >= 1"
        if errors:
            raise ValidationError(errors)


def _validate_ip_list(value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("a list of at least one IPv4 or IPv6 address")
    for item in value:
        try:
            ipaddress.ip_address(item if isinstance(item, str) else "")
        except ValueError as exc:
            raise ValidationError(f"{item!r} is not an IPv4 or IPv6 address") from exc


class Region(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[validate_name])
    country = models.CharField(max_length=2, validators=[validate_country])
    lat = models.FloatField()
    lon = models.FloatField()
    addresses = models.JSONField(default=list, validators=[_validate_ip_list])
    priority = models.PositiveIntegerField(default=1)
    weight = models.FloatField(default=1.0)
    admin_state = models.CharField(
        max_length=16, choices=AdminState.choices, default=AdminState.ACTIVE
    )
    failover_paused = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def continent(self) -> str:
        return continent_of(self.country) or ""

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.lat is not None and not -90 <= self.lat <= 90:
            errors["lat"] = f"{self.lat} out of range (-90..90)"
        if self.lon is not None and not -180 <= self.lon <= 180:
            errors["lon"] = f"{self.lon} out of range (-180..180)"
        if self.weight is not None and self.weight < 0:
            errors["weight"] = "must be >= 0"
        if errors:
            raise ValidationError(errors)


class Endpoint(models.Model):
    region = models.ForeignKey(Region, on_delete=models.CASCADE, related_name="endpoints")
    name = models.CharField(max_length=63, unique=True, validators=[validate_name])
    address = models.CharField(max_length=270)
    gpu = models.ForeignKey(GpuProfile, on_delete=models.PROTECT, related_name="endpoints")
    gpus = models.PositiveIntegerField(default=1)
    model_names = models.JSONField(default=list, help_text="models served")
    weight = models.FloatField(default=1.0)
    admin_state = models.CharField(
        max_length=16, choices=AdminState.choices, default=AdminState.ACTIVE
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["region__name", "name"]
        indexes = [models.Index(fields=["admin_state"])]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        try:
            parse_address(self.address or "")
        except ValueError as exc:
            errors["address"] = f"{self.address!r} is not host:port or an IP address ({exc})"
        if self.gpus is not None and self.gpus < 1:
            errors["gpus"] = "must be >= 1"
        served = self.model_names
        if (
            not isinstance(served, list)
            or not served
            or not all(isinstance(m, str) and m for m in served)
        ):
            errors["model_names"] = "a non-empty list of model names"
        else:
            for m in served:
                try:
                    validate_name(m)
                except ValidationError:
                    errors["model_names"] = f"{m!r} {NAME_VALIDATOR_MSG}"
        if self.weight is not None and self.weight < 0:
            errors["weight"] = "must be >= 0"
        if errors:
            raise ValidationError(errors)


class ResidencyMode(models.TextChoices):
    STRICT = "strict"
    PREFERRED = "preferred"


class ResidencyRule(models.Model):
    """Clients of these countries, country sets or continents may only be served by ``regions``.

    ``sets`` names country sets of the engine (``trafficmgr.routing.countrysets``: ``EEA``,
    ``ASEAN``, ...); the rule covers the union of its countries, its sets' and its continents'.
    """

    name = models.CharField(max_length=63, unique=True, validators=[validate_name])
    countries = models.JSONField(default=list, blank=True)
    continents = models.JSONField(default=list, blank=True)
    sets = models.JSONField(default=list, blank=True)
    regions = models.ManyToManyField(Region, related_name="residency_rules")
    mode = models.CharField(
        max_length=16, choices=ResidencyMode.choices, default=ResidencyMode.STRICT
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        countries = self.countries if isinstance(self.countries, list) else None
        continents = self.continents if isinstance(self.continents, list) else None
        if countries is None:
            errors["countries"] = "a list of ISO 3166-1 alpha-2 codes"
        elif bad := [
            c
            for c in countries
            if not isinstance(c, str) or c != c.upper() or continent_of(c) is None
        ]:
            errors["countries"] = f"not ISO 3166-1 alpha-2 codes: {bad!r}"
        if continents is None:
            errors["continents"] = "a list of continent codes"
        elif bad := [c for c in continents if c not in CONTINENTS]:
            errors["continents"] = f"not continent codes ({', '.join(sorted(CONTINENTS))}): {bad!r}"
        sets = self.sets if isinstance(self.sets, list) else None
        if sets is None:
            errors["sets"] = f"a list of country set names ({', '.join(SET_NAMES)})"
        elif bad := [s for s in sets if not isinstance(s, str) or s not in COUNTRY_SETS]:
            errors["sets"] = f"unknown country sets (known: {', '.join(SET_NAMES)}): {bad!r}"
        if not errors and not countries and not continents and not sets:
            errors["countries"] = (
                "a residency rule must name client countries, country sets or continents"
            )
        if errors:
            raise ValidationError(errors)


class AllDown(models.TextChoices):
    FAIL_OPEN = "fail_open"
    FAIL_CLOSED = "fail_closed"


class FailoverPolicy(models.Model):
    """Health thresholds and failover behaviour; the fleet's policy is named ``default``."""

    name = models.CharField(
        max_length=63, unique=True, default="default", validators=[validate_name]
    )
    heartbeat_interval_s = models.FloatField(default=1.0)
    miss_threshold = models.PositiveIntegerField(default=3)
    up_threshold = models.PositiveIntegerField(default=2)
    down_threshold = models.PositiveIntegerField(default=1)
    hold_down_s = models.FloatField(default=5.0)
    slow_start_s = models.FloatField(default=30.0)
    spillover_headroom = models.FloatField(default=0.1)
    all_down = models.CharField(max_length=16, choices=AllDown.choices, default=AllDown.FAIL_OPEN)
    max_shift_per_tick = models.FloatField(default=1.0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "failover policies"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for field, bound in FAILOVER_RANGES.items():
            value = getattr(self, field)
            if value is not None and (problem := bound.check(value)):
                errors[field] = problem
        if (
            self.hold_down_s is not None
            and self.heartbeat_interval_s is not None
            and self.miss_threshold is not None
            and self.hold_down_s > 0
            and self.hold_down_s < self.heartbeat_interval_s
        ):
            errors["hold_down_s"] = "must be 0 or at least one heartbeat interval"
        if errors:
            raise ValidationError(errors)
