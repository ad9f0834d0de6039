"""Model invariants enforced by clean()/full_clean(), whatever path writes the row."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from regions.models import Endpoint, FailoverPolicy, GpuProfile, Region, ResidencyRule

pytestmark = pytest.mark.django_db


def errors_of(obj: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        obj.full_clean()
    return dict(info.value.message_dict)


def region(**overrides: Any) -> Region:
    fields: dict[str, Any] = {
        "name": "r-1",
        "country": "IE",
        "lat": 53.3,
        "lon": -6.2,
        "addresses": ["192.0.2.1"],
    }
    return Region(**(fields | overrides))


def test_a_valid_region_passes(db: None) -> None:
    region().full_clean()


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"lat": 90.5}, "lat"),
        ({"lat": -91}, "lat"),
        ({"lon": 180.01}, "lon"),
        ({"lon": -181}, "lon"),
        ({"weight": -0.1}, "weight"),
        ({"country": "ie"}, "country"),
        ({"country": "XX"}, "country"),
        ({"name": "bad name"}, "name"),
        ({"name": "<b>"}, "name"),
        ({"addresses": []}, "addresses"),
        ({"addresses": ["192.0.2.256"]}, "addresses"),
        ({"addresses": ["2001:db8::zz"]}, "addresses"),
        ({"addresses": "192.0.2.1"}, "addresses"),
        ({"admin_state": "draining"}, "admin_state"),
    ],
)
def test_region_invariants(overrides: dict[str, Any], field: str) -> None:
    assert field in errors_of(region(**overrides))


@pytest.fixture
def h100(db: None) -> GpuProfile:
    return GpuProfile.objects.create(
        name="H100", prefill_tokens_per_s=12000, decode_tokens_per_s=2400, max_concurrency=64
    )


def endpoint(h100: GpuProfile, **overrides: Any) -> Endpoint:
    parent = Region.objects.get_or_create(
        name="r-1", defaults={"country": "IE", "lat": 0.0, "lon": 0.0, "addresses": ["192.0.2.1"]}
    )[0]
    fields: dict[str, Any] = {
        "name": "e-1",
        "region": parent,
        "gpu": h100,
        "address": "10.0.0.1:8000",
        "gpus": 8,
        "model_names": ["m"],
    }
    return Endpoint(**(fields | overrides))


@pytest.mark.parametrize(
    "address",
    ["10.0.0.1:8000", "10.0.0.1", "[2001:db8::1]:8000", "2001:db8::1", "gpu-1.example.test:443"],
)
def test_endpoint_addresses_accepted(h100: GpuProfile, address: str) -> None:
    endpoint(h100, address=address).full_clean()


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"address": "10.0.0.1:0"}, "address"),
        ({"address": "10.0.0.1:65536"}, "address"),
        ({"address": "10.0.0.999:80"}, "address"),
        ({"address": "[2001:db8::1]80"}, "address"),
        ({"address": "not a host:80"}, "address"),
        ({"address": ""}, "address"),
        ({"gpus": 0}, "gpus"),
        ({"model_names": []}, "model_names"),
        ({"model_names": ["ok", ""]}, "model_names"),
        ({"model_names": ["<script>"]}, "model_names"),
        ({"model_names": "llama"}, "model_names"),
        ({"weight": -1}, "weight"),
    ],
)
def test_endpoint_invariants(h100: GpuProfile, overrides: dict[str, Any], field: str) -> None:
    assert field in errors_of(endpoint(h100, **overrides))


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"prefill_tokens_per_s": 0}, "prefill_tokens_per_s"),
        ({"decode_tokens_per_s": -5}, "decode_tokens_per_s"),
        ({"max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_gpu_profile_invariants(db: None, overrides: dict[str, Any], field: str) -> None:
    fields: dict[str, Any] = {
        "name": "X",
        "prefill_tokens_per_s": 1.0,
        "decode_tokens_per_s": 1.0,
        "max_concurrency": 1,
    }
    assert field in errors_of(GpuProfile(**(fields | overrides)))


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"countries": [], "continents": []}, "countries"),
        ({"countries": ["ZZ"]}, "countries"),
        ({"countries": "IN"}, "countries"),
        ({"continents": ["XX"]}, "continents"),
        ({"mode": "loose"}, "mode"),
    ],
)
def test_residency_rule_invariants(db: None, overrides: dict[str, Any], field: str) -> None:
    fields: dict[str, Any] = {"name": "r", "countries": ["IN"], "continents": []}
    assert field in errors_of(ResidencyRule(**(fields | overrides)))


def test_residency_rule_with_continents_only_passes(db: None) -> None:
    ResidencyRule(name="gdpr", countries=[], continents=["EU"]).full_clean()


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"heartbeat_interval_s": 0.01}, "heartbeat_interval_s"),
        ({"miss_threshold": 0}, "miss_threshold"),
        ({"up_threshold": 101}, "up_threshold"),
        ({"spillover_headroom": 0.95}, "spillover_headroom"),
        ({"max_shift_per_tick": 0}, "max_shift_per_tick"),
        ({"hold_down_s": 0.5, "heartbeat_interval_s": 1.0}, "hold_down_s"),
        ({"slow_start_s": 90000}, "slow_start_s"),
        ({"all_down": "maybe"}, "all_down"),
    ],
)
def test_failover_policy_invariants(db: None, overrides: dict[str, Any], field: str) -> None:
    assert field in errors_of(FailoverPolicy(**({"name": "p"} | overrides)))


def test_fleet_apply_runs_model_validation(world: Any) -> None:
    """A Fleet built in code skips the file's checks; full_clean still guards the rows."""
    import dataclasses

    from regions.fleet.plan import apply_plan, plan_fleet
    from trafficmgr.fleetfile import FleetError

    bad = dataclasses.replace(
        world.regions[0], location=dataclasses.replace(world.regions[0].location, lat=123.0)
    )
    fleet = dataclasses.replace(world, regions=(bad, *world.regions[1:]))
    before = Region.objects.get(name=bad.name).lat
    with pytest.raises(FleetError, match=f"region {bad.name}.lat"):
        apply_plan(plan_fleet(fleet))
    assert Region.objects.get(name=bad.name).lat == before


def test_a_malformed_drill_schedule_is_a_system_check_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from regions.checks import trafficmgr_settings

    monkeypatch.setenv("TRAFFICMGR_DRILL_SCHEDULE", "eu-west:meteor_strike:30:86400")
    problems = trafficmgr_settings()
    assert [p.id for p in problems] == ["trafficmgr.E003"]
    assert "meteor_strike" in problems[0].msg
    monkeypatch.setenv("TRAFFICMGR_DRILL_SCHEDULE", "eu-west:region_outage:30:86400")
    assert trafficmgr_settings() == []
