"""The engine snapshot of the stored fleet.

``fleet_snapshot`` is the one place where stored models become the engine's input.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch

from regions.models import (
    Endpoint,
    FailoverPolicy,
    FleetSettings,
    GpuProfile,
    Region,
    ResidencyRule,
)
from trafficmgr.routing import types as t
from trafficmgr.routing.countries import continent_of

DEFAULT_POLICY = "default"


def fleet_snapshot() -> t.Fleet:
    """Read the stored configuration as the engine's Fleet, in a bounded number of queries."""
    settings = FleetSettings.objects.filter(pk=1).first()
    profiles = {p.name: _profile(p) for p in GpuProfile.objects.all()}
    endpoints = Endpoint.objects.select_related("gpu").order_by("name")
    regions = Region.objects.prefetch_related(Prefetch("endpoints", queryset=endpoints))
    rules = ResidencyRule.objects.prefetch_related(
        Prefetch("regions", queryset=Region.objects.order_by("name"))
    )
    policy = FailoverPolicy.objects.filter(name=DEFAULT_POLICY).first()
    clients = settings.clients if settings is not None else []
    return t.Fleet(
        zone=settings.zone if settings is not None else FleetSettings().zone,
        ttl=settings.ttl if settings is not None else FleetSettings().ttl,
        gpu_profiles=profiles,
        regions=tuple(_region(r) for r in regions),
        residency=tuple(_rule(r) for r in rules),
        failover=_policy(policy) if policy is not None else t.FailoverPolicy(),
        clients=tuple(t.ClientShare(str(c["country"]), float(c["share"])) for c in clients),
        slo=_slo(settings.slo if settings is not None else {}),
        unlocated=_unlocated(settings.unlocated_clients if settings is not None else ""),
    )


def _unlocated(text: str) -> t.UnlocatedClients:
    """Read the stored setting; one the engine cannot read denies (fail closed), never opens."""
    if not text:
        return t.UnlocatedClients()
    try:
        return t.UnlocatedClients.parse(text)
    except ValueError:
        return t.UnlocatedClients(t.UnlocatedKind.DENY)


def _slo(doc: Any) -> t.ServiceObjective:
    """Read the stored objective (the fleet file's ``slo``; {} is the default)."""
    if not isinstance(doc, dict) or not doc:
        return t.ServiceObjective()
    models = doc.get("models") or {}
    return t.ServiceObjective(
        float(doc.get("ttft_p99_ms", t.DEFAULT_TTFT_P99_MS)),
        {str(m): float(spec["ttft_p99_ms"]) for m, spec in models.items()},
    )


def _profile(p: GpuProfile) -> t.GpuProfile:
    return t.GpuProfile(
        name=p.name,
        prefill_tokens_per_s=p.prefill_tokens_per_s,
        decode_tokens_per_s=p.decode_tokens_per_s,
        max_concurrency=p.max_concurrency,
    )


def _endpoint(e: Endpoint, region: str) -> t.Endpoint:
    return t.Endpoint(
        name=e.name,
        region=region,
        address=e.address,
        gpu=e.gpu.name,
        gpus=e.gpus,
        models=tuple(e.model_names),
        weight=e.weight,
        admin_state=t.AdminState(e.admin_state),
    )


def _region(r: Region) -> t.Region:
    return t.Region(
        name=r.name,
        country=r.country,
        continent=continent_of(r.country) or "",
        location=t.GeoPoint(r.lat, r.lon),
        addresses=tuple(r.addresses),
        endpoints=tuple(_endpoint(e, r.name) for e in r.endpoints.all()),
        priority=r.priority,
        weight=r.weight,
        admin_state=t.AdminState(r.admin_state),
    )


def _rule(r: ResidencyRule) -> t.ResidencyRule:
    return t.ResidencyRule(
        name=r.name,
        countries=frozenset(r.countries),
        continents=frozenset(r.continents),
        regions=tuple(reg.name for reg in r.regions.all()),
        mode=t.ResidencyMode(r.mode),
        sets=frozenset(r.sets),
    )


def _policy(p: FailoverPolicy) -> t.FailoverPolicy:
    return t.FailoverPolicy(
        heartbeat_interval_s=p.heartbeat_interval_s,
        miss_threshold=p.miss_threshold,
        up_threshold=p.up_threshold,
        down_threshold=p.down_threshold,
        hold_down_s=p.hold_down_s,
        slow_start_s=p.slow_start_s,
        spillover_headroom=p.spillover_headroom,
        all_down=t.AllDown(p.all_down),
        max_shift_per_tick=p.max_shift_per_tick,
    )
