"""Country sets and the service objective through the control plane: apply, store, snapshot,
export and the residency-rule API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from regions.fleet.plan import apply_plan, plan_fleet
from regions.fleet.services import fleet_snapshot
from regions.models import FleetSettings, ResidencyRule
from trafficmgr.fleetfile import dump_fleet, load_fleet_text
from trafficmgr.routing.countrysets import COUNTRY_SETS
from trafficmgr.routing.types import ServiceObjective

pytestmark = pytest.mark.django_db

API = "/api/v1"


def with_sets(world_yaml: str) -> str:
    doc = yaml.safe_load(world_yaml)
    doc["residency"].append(
        {
            "name": "gdpr",
            "clients": {"sets": ["EEA"], "countries": ["CH"]},
            "regions": ["eu-west"],
            "mode": "strict",
        }
    )
    doc["slo"] = {"ttft_p99_ms": 8000, "models": {"llama-3-70b": {"ttft_p99_ms": 15000}}}
    return yaml.safe_dump(doc, sort_keys=False)


def test_sets_and_slo_are_stored_and_snapshot_as_applied(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    plan = apply_yaml(with_sets(world_yaml))
    assert {c.name for c in plan.changes if c.action == "create"} == {"gdpr"}
    rule = ResidencyRule.objects.get(name="gdpr")
    assert (rule.sets, rule.countries, rule.continents) == (["EEA"], ["CH"], [])
    assert FleetSettings.objects.get().slo == {
        "ttft_p99_ms": 8000,
        "models": {"llama-3-70b": {"ttft_p99_ms": 15000}},
    }
    stored = fleet_snapshot()
    gdpr = next(r for r in stored.residency if r.name == "gdpr")
    assert gdpr.countries == COUNTRY_SETS["EEA"] | {"CH"} and gdpr.sets == {"EEA"}
    assert stored.slo == ServiceObjective(8000, {"llama-3-70b": 15000})
    assert set(stored.residency) == set(load_fleet_text(with_sets(world_yaml)).residency)


def test_second_apply_and_export_round_trip_are_no_ops(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    apply_yaml(with_sets(world_yaml))
    assert plan_fleet(load_fleet_text(with_sets(world_yaml))).empty
    exported = dump_fleet(fleet_snapshot())
    assert "sets: [EEA]" in exported and "slo:" in exported
    assert plan_fleet(load_fleet_text(exported)).empty


def test_changing_sets_is_planned_as_a_rule_update(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    apply_yaml(with_sets(world_yaml))
    plan = plan_fleet(load_fleet_text(with_sets(world_yaml).replace("EEA", "EEA_UK_CH")))
    (change,) = plan.changes  # CH is in the new set: no longer listed beside it
    assert change.fields == {"sets": (["EEA"], ["EEA_UK_CH"]), "countries": (["CH"], [])}
    apply_plan(plan)
    assert ResidencyRule.objects.get(name="gdpr").sets == ["EEA_UK_CH"]


def test_the_api_takes_and_returns_sets(world: Any, make_client: Callable[..., Any]) -> None:
    admin = make_client("admin")
    body = {"name": "asean", "sets": ["ASEAN"], "regions": ["ap-south"]}
    created = admin.post(f"{API}/residency-rules/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["sets"] == ["ASEAN"] and created.json()["countries"] == []
    rule = next(r for r in fleet_snapshot().residency if r.name == "asean")
    assert rule.countries == COUNTRY_SETS["ASEAN"]


def test_the_api_refuses_an_unknown_set_naming_the_field(
    world: Any, make_client: Callable[..., Any], state: Callable[[], dict[str, Any]]
) -> None:
    admin = make_client("admin")
    before = state()
    body = {"name": "eu", "sets": ["EEA", "EUROPE"], "regions": ["eu-west"]}
    response = admin.post(f"{API}/residency-rules/", body, format="json")
    assert response.status_code == 400
    doc = response.json()
    assert "sets" in doc["fields"] and "EUROPE" in " ".join(doc["fields"]["sets"])
    assert state() == before
