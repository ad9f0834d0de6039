"""Write a fleet plan's changes into the models; called by ``regions.fleet.plan.apply_plan``.

Every row passes its model's ``full_clean`` first and is saved one by one, so the audit
signals record each object's before and after.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.core.exceptions import ValidationError
from django.db import models

from regions.fleet.changes import Change
from regions.fleet.services import DEFAULT_POLICY
from regions.models import (
    Endpoint,
    FailoverPolicy,
    FleetSettings,
    GpuProfile,
    Region,
    ResidencyRule,
)
from trafficmgr.fleetfile import FleetError, FleetIssue
from trafficmgr.fleetfile.write import slo_doc
from trafficmgr.routing import types as t


def _names(changes: Iterable[Change], kind: str, *actions: str) -> list[str]:
    return [c.name for c in changes if c.type == kind and c.action in actions]


def write_changes(fleet: t.Fleet, changes: Sequence[Change]) -> None:
    """Write the planned changes, parents before children, deletes before re-creates."""
    if _names(changes, "fleet_settings", "create", "update"):
        _save_settings(fleet)
    for name in _names(changes, "gpu_profile", "create", "update"):
        _save_profile(fleet.gpu_profiles[name])
    for name in _names(changes, "region", "create", "update"):
        _save_region(fleet.region(name))
    _delete(Endpoint, _names(changes, "endpoint", "delete"))
    _delete(ResidencyRule, _names(changes, "residency_rule", "delete"))
    endpoints = {e.name: e for e in fleet.endpoints()}
    upserts = _names(changes, "endpoint", "create", "update")
    if upserts:
        regions = {r.name: r for r in Region.objects.all()}
        profiles = {p.name: p for p in GpuProfile.objects.all()}
        for name in upserts:
            _save_endpoint(endpoints[name], regions, profiles)
    rules = {r.name: r for r in fleet.residency}
    for name in _names(changes, "residency_rule", "create", "update"):
        _save_rule(rules[name])
    _delete(Region, _names(changes, "region", "delete"))
    _delete(GpuProfile, _names(changes, "gpu_profile", "delete"))
    if _names(changes, "failover_policy", "create", "update"):
        _save_policy(fleet.failover)


def _delete(model: type[models.Model], names: list[str]) -> None:
    for obj in model._default_manager.filter(name__in=names):
        obj.delete()


def _store(obj: models.Model, label: str) -> None:
    """Check model invariants, then save; a violation becomes a FleetError naming the object."""
    try:
        obj.full_clean(validate_unique=False)
    except ValidationError as exc:
        raise FleetError(
            [
                FleetIssue(f"{label}.{key}", msg)
                for key, msgs in exc.message_dict.items()
                for msg in msgs
            ]
        ) from exc
    obj.save()


def _save_settings(fleet: t.Fleet) -> None:
    obj = FleetSettings.objects.filter(pk=1).first() or FleetSettings(pk=1)
    obj.zone, obj.ttl = fleet.zone, fleet.ttl
    obj.clients = [{"country": c.country, "share": c.share} for c in fleet.clients]
    obj.slo = slo_doc(fleet.slo)
    obj.unlocated_clients = str(fleet.unlocated)
    _store(obj, "fleet")


def _save_profile(p: t.GpuProfile) -> None:
    obj = GpuProfile.objects.filter(name=p.name).first() or GpuProfile(name=p.name)
    obj.prefill_tokens_per_s = p.prefill_tokens_per_s
    obj.decode_tokens_per_s = p.decode_tokens_per_s
    obj.max_concurrency = p.max_concurrency
    _store(obj, f"gpu_profiles.{p.name}")


def _save_region(r: t.Region) -> None:
    obj = Region.objects.filter(name=r.name).first() or Region(name=r.name)
    obj.country, obj.lat, obj.lon = r.country, r.location.lat, r.location.lon
    obj.addresses, obj.priority, obj.weight = list(r.addresses), r.priority, r.weight
    obj.admin_state = r.admin_state.value
    _store(obj, f"region {r.name}")


def _save_endpoint(
    e: t.Endpoint, regions: dict[str, Region], profiles: dict[str, GpuProfile]
) -> None:
    obj = Endpoint.objects.filter(name=e.name).first() or Endpoint(name=e.name)
    obj.region, obj.gpu = regions[e.region], profiles[e.gpu]
    obj.address, obj.gpus, obj.model_names = e.address, e.gpus, list(e.models)
    obj.weight, obj.admin_state = e.weight, e.admin_state.value
    _store(obj, f"endpoint {e.name}")


def _save_rule(r: t.ResidencyRule) -> None:
    obj = ResidencyRule.objects.filter(name=r.name).first() or ResidencyRule(name=r.name)
    obj.countries, obj.continents = sorted(r.listed_countries()), sorted(r.continents)
    obj.sets = sorted(r.sets)
    obj.mode = r.mode.value
    _store(obj, f"residency rule {r.name}")
    obj.regions.set(Region.objects.filter(name__in=r.regions))


def _save_policy(f: t.FailoverPolicy) -> None:
    obj = FailoverPolicy.objects.filter(name=DEFAULT_POLICY).first() or FailoverPolicy(
        name=DEFAULT_POLICY
    )
    for key in (
        "heartbeat_interval_s",
        "miss_threshold",
        "up_threshold",
        "down_threshold",
        "hold_down_s",
        "slow_start_s",
        "spillover_headroom",
        "max_shift_per_tick",
    ):
        setattr(obj, key, getattr(f, key))
    obj.all_down = f.all_down.value
    _store(obj, "failover")
