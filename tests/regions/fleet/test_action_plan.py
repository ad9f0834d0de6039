"""The plan every change shares: named unsafe reasons, what force lifts, ``raise_if_unsafe``."""

from __future__ import annotations

import pytest

from regions.errors import DomainError, UnsafePlan
from regions.fleet.actionplan import (
    NEVER_FORCEABLE,
    ActionPlan,
    CapacityChange,
    StrandedZone,
    Unsafe,
    UnsafeReason,
    check_may_force,
)

MOVED = UnsafeReason(Unsafe.TRAFFIC_MOVED, "moves 80% of all traffic (more than 50%)")
DRAINED = UnsafeReason(Unsafe.TARGET_INACTIVE, "region us-east is drained")


class RefusedForTest(UnsafePlan):
    code = "refused_for_test"
    refusal = "no: {reasons}"


@pytest.mark.parametrize("code", list(Unsafe))
def test_every_reason_says_whether_an_admin_may_force_it(code: Unsafe) -> None:
    reason = UnsafeReason(code, f"because {code.value}")
    assert reason.forceable is (code not in NEVER_FORCEABLE)
    assert reason.as_dict() == {"reason": f"because {code.value}", "forceable": reason.forceable}
    plan = ActionPlan("a change", unsafe=(reason,))
    assert not plan.safe and plan.forceable is reason.forceable
    assert plan.blocking(force=False) == (reason,)
    assert plan.blocking(force=True) == (() if reason.forceable else (reason,))
    assert plan.forced(True) is reason.forceable and plan.forced(False) is False
    with pytest.raises(UnsafePlan) as info:
        plan.raise_if_unsafe()
    assert info.value.unsafe == (code.value,)
    if reason.forceable:
        plan.raise_if_unsafe(force=True)
    else:
        with pytest.raises(UnsafePlan):
            plan.raise_if_unsafe(force=True)


def test_the_never_forceable_reasons_are_the_drills_nothing_to_practise_ones() -> None:
    assert {Unsafe.TARGET_INACTIVE, Unsafe.NO_ACTIVE_ENDPOINT, Unsafe.DRILL_UNDER_WAY} == (
        NEVER_FORCEABLE
    )


def test_a_safe_plan_passes_with_or_without_force() -> None:
    plan = ActionPlan("undrain region eu-west")
    assert plan.safe and not plan.forceable and plan.reasons() == []
    assert plan.blocking() == () and not plan.forced(True)
    plan.raise_if_unsafe()
    plan.raise_if_unsafe(force=True)


def test_the_refusal_names_every_blocking_reason_and_is_a_409() -> None:
    zone = StrandedZone("gdpr", "EU", "llama-3-70b")
    plan = ActionPlan("drain region eu-central", stranded=(zone,), unsafe=(MOVED, zone.unsafe()))
    with pytest.raises(UnsafePlan) as info:
        plan.raise_if_unsafe(extra={"plan": {"safe": False}})
    error = info.value
    assert isinstance(error, DomainError) and error.status_code == 409
    assert error.code == "unsafe_plan"
    assert error.unsafe == ("traffic_moved", "residency_stranded")
    assert error.detail == (
        "refused: the plan moves 80% of all traffic (more than 50%); would leave residency "
        "zone EU (rule gdpr) with no region for llama-3-70b; apply with force if this is intended"
    )
    assert error.extra == {"plan": {"safe": False}}


def test_force_lifts_only_the_forceable_reasons() -> None:
    plan = ActionPlan("drill region_outage on us-east", unsafe=(MOVED, DRAINED))
    assert not plan.forceable and plan.forced(True)
    assert plan.blocking(force=True) == (DRAINED,)
    with pytest.raises(UnsafePlan) as info:
        plan.raise_if_unsafe(force=True)
    assert info.value.unsafe == ("target_inactive",)
    assert "moves 80%" not in info.value.detail


def test_a_feature_refuses_with_its_own_code_and_wording() -> None:
    plan = ActionPlan("a change", unsafe=(MOVED,))
    with pytest.raises(RefusedForTest) as info:
        plan.raise_if_unsafe(error=RefusedForTest, extra={"id": 7})
    assert info.value.code == "refused_for_test" and info.value.status_code == 409
    assert info.value.detail == "no: moves 80% of all traffic (more than 50%)"
    assert info.value.extra == {"id": 7}


def test_only_an_admin_may_force() -> None:
    check_may_force(False, False, "a drill")
    check_may_force(True, True, "a drill")
    with pytest.raises(DomainError) as info:
        check_may_force(True, False, "a drill")
    assert (info.value.status_code, info.value.code) == (403, "permission_denied")
    assert info.value.detail == "only an admin may force a drill"


@pytest.mark.parametrize(
    ("before", "after", "left", "removed"),
    [(100.0, 25.0, 0.25, 0.75), (100.0, 150.0, 1.5, 0.0), (0.0, 10.0, None, 0.0)],
)
def test_capacity_left_and_removed(
    before: float, after: float, left: float | None, removed: float
) -> None:
    change = CapacityChange("llama-3-70b", before, after)
    assert change.left_share == left
    assert change.removed_share == pytest.approx(removed)


def test_a_stranded_zone_is_one_named_reason() -> None:
    zone = StrandedZone("india-local", "IN", "llama-3-70b")
    assert zone.as_dict() == {"rule": "india-local", "zone": "IN", "model": "llama-3-70b"}
    assert zone.unsafe() == UnsafeReason(
        Unsafe.RESIDENCY_STRANDED,
        "would leave residency zone IN (rule india-local) with no region for llama-3-70b",
    )
