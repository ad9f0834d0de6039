"""The safety valve: a plan deleting > 30 % of endpoints or > 50 % of capacity needs force."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from regions.fleet.plan import UnsafePlan, apply_plan, plan_fleet, serving_capacity
from regions.models import Endpoint, Region
from trafficmgr.fleetfile import load_fleet_text

pytestmark = pytest.mark.django_db

# The world: 5 endpoints. Serving capacity counts active endpoints of active regions only
# (us-east is drained): euw-1 H100×8 = 19,200; euw-2 A100×4 = 5,200; aps-1 A100×8 = 10,400.
WORLD_CAPACITY = 2400 * 8 + 1300 * 4 + 1300 * 8


def edited(world_yaml: str, edit: Callable[[dict[str, Any]], None]) -> str:
    doc = yaml.safe_load(world_yaml)
    edit(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def drop_endpoints(*names: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        for region in doc["regions"]:
            region["endpoints"] = [e for e in region["endpoints"] if e["name"] not in names]

    return edit


def test_world_capacity(world: Any) -> None:
    assert serving_capacity(world) == WORLD_CAPACITY


def test_deleting_30_percent_of_endpoints_is_allowed(world: Any, world_yaml: str) -> None:
    # 1 of 5 = 20 %; use-2 sits in the drained region, so no serving capacity is lost.
    plan = plan_fleet(load_fleet_text(edited(world_yaml, drop_endpoints("use-2"))))
    assert plan.safety.reasons() == []
    apply_plan(plan)
    assert Endpoint.objects.count() == 4


def test_deleting_over_30_percent_of_endpoints_is_refused(
    world: Any, world_yaml: str, state: Callable[[], dict[str, Any]]
) -> None:
    before = state()
    plan = plan_fleet(load_fleet_text(edited(world_yaml, drop_endpoints("use-1", "use-2"))))
    assert plan.safety.endpoints_deleted == 2 and plan.safety.endpoints_before == 5
    assert "UNSAFE" in plan.render()
    with pytest.raises(UnsafePlan) as info:
        apply_plan(plan)
    assert info.value.status_code == 409
    assert "deletes 2 of 5 endpoints (40%, limit 30%)" in info.value.detail
    assert info.value.extra["safety"]["endpoints_deleted"] == 2
    assert state() == before


def test_removing_over_half_the_capacity_is_refused(
    world: Any, world_yaml: str, state: Callable[[], dict[str, Any]]
) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][0]["state"] = "drained"  # eu-west: 24,400 of 34,800 (70 %)

    before = state()
    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    assert plan.safety.endpoints_deleted == 0
    assert plan.safety.capacity_before == WORLD_CAPACITY
    assert plan.safety.capacity_after == 1300 * 8
    with pytest.raises(UnsafePlan, match=r"removes 70% of serving capacity \(34,800 -> 10,400"):
        apply_plan(plan)
    assert state() == before


def test_shrinking_gpus_counts_as_capacity_removed(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][0]["endpoints"][0]["gpus"] = 1  # euw-1: 19,200 → 2,400
        doc["regions"][2]["endpoints"][0]["gpus"] = 1  # aps-1: 10,400 → 1,300

    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    assert plan.safety.endpoints_deleted == 0
    assert plan.safety.capacity_fraction == pytest.approx((16800 + 9100) / WORLD_CAPACITY)
    with pytest.raises(UnsafePlan):
        apply_plan(plan)


def test_force_applies_an_unsafe_plan(world: Any, world_yaml: str) -> None:
    plan = plan_fleet(load_fleet_text(edited(world_yaml, drop_endpoints("euw-1", "euw-2"))))
    assert len(plan.safety.reasons()) == 2
    applied = apply_plan(plan, force=True)
    assert applied.counts()["delete"] == 2
    assert not Endpoint.objects.filter(region__name="eu-west").exists()
    assert Region.objects.filter(name="eu-west").exists()


def test_a_first_apply_into_an_empty_store_is_never_unsafe(db: None, world_yaml: str) -> None:
    plan = plan_fleet(load_fleet_text(world_yaml))
    assert plan.safety.capacity_before == 0
    assert plan.safety.reasons() == []
