"""A fleet apply's plan names why it is unsafe: ``endpoints_deleted``, ``capacity_removed``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from regions.errors import UnsafePlan
from regions.fleet.actionplan import Unsafe
from regions.fleet.plan import apply_plan, plan_fleet
from tests.regions.fleet.test_fleet_safety import WORLD_CAPACITY, drop_endpoints, edited
from trafficmgr.fleetfile import load_fleet_text

pytestmark = pytest.mark.django_db


def drain_eu_west(doc: dict[str, Any]) -> None:
    doc["regions"][0]["state"] = "drained"  # eu-west: 24,400 of 34,800 decode tokens/s


@pytest.mark.parametrize(
    ("edit", "codes"),
    [
        (drop_endpoints("use-1", "use-2"), [Unsafe.ENDPOINTS_DELETED]),
        (drain_eu_west, [Unsafe.CAPACITY_REMOVED]),
        (drop_endpoints("euw-1", "euw-2"), [Unsafe.ENDPOINTS_DELETED, Unsafe.CAPACITY_REMOVED]),
    ],
)
def test_each_refusal_is_a_named_reason_an_admin_may_force(
    world: Any,
    world_yaml: str,
    state: Callable[[], dict[str, Any]],
    edit: Callable[[dict[str, Any]], None],
    codes: list[Unsafe],
) -> None:
    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    action_plan = plan.action_plan()
    assert [r.code for r in action_plan.unsafe] == codes
    assert action_plan.reasons() == plan.safety.reasons() == plan.as_dict()["safety"]["unsafe"]
    assert action_plan.forceable
    (capacity,) = action_plan.capacity
    assert (capacity.scope, capacity.before) == ("fleet", WORLD_CAPACITY)
    before = state()
    with pytest.raises(UnsafePlan) as info:
        apply_plan(plan)
    assert info.value.code == "unsafe_plan"
    assert info.value.unsafe == tuple(c.value for c in codes)
    assert info.value.detail.startswith("refused: the plan ")
    assert state() == before
    assert apply_plan(plan, force=True).counts() == plan.counts()


def test_a_safe_apply_has_no_reason(world: Any, world_yaml: str) -> None:
    plan = plan_fleet(load_fleet_text(edited(world_yaml, drop_endpoints("use-2"))))
    assert plan.action_plan().safe
    assert plan.action_plan().subject.startswith("apply fleet ")
