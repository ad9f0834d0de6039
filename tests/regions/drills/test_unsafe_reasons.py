"""Each guardrail refusal is a named unsafe reason of the drill's plan; force lifts some only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from regions.fleet.actionplan import Unsafe
from tests.regions.drills.conftest import api_drill
from tests.regions.drills.test_guardrails import eu_fleet  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db


def plan_of(kind: str, target: str) -> Any:
    """The drill's plan as the guardrails state it now."""
    from regions.drills import guardrails
    from regions.drills.spec import resolve
    from regions.fleet import snapshot

    snapshot.forget()
    view = snapshot.load()
    return guardrails.preflight(resolve(view.fleet, kind, target, 10, None), view).plan


def codes(plan: Any) -> list[Unsafe]:
    return [r.code for r in plan.unsafe]


def test_a_safe_drill_states_the_capacity_it_leaves(
    world: Any, healthy: Callable[..., float]
) -> None:
    healthy()
    plan = plan_of("region_outage", "eu-west")
    assert plan.safe and plan.subject == "drill region_outage on eu-west"
    fleet = plan.capacity[0]
    assert fleet.scope == "fleet" and fleet.after < fleet.before
    assert fleet.demand is not None and 0 < fleet.demand < fleet.after


def test_a_drained_target_is_never_forceable(world: Any) -> None:
    plan = plan_of("region_outage", "us-east")
    assert codes(plan) == [Unsafe.TARGET_INACTIVE]
    assert not plan.forceable and plan.blocking(force=True) == plan.unsafe


def test_a_region_without_an_active_endpoint_is_never_forceable(
    world: Any, healthy: Callable[..., float]
) -> None:
    from regions.models import Endpoint

    healthy()
    Endpoint.objects.filter(name__in=["euw-1", "euw-2"]).update(admin_state="drained")
    plan = plan_of("region_outage", "eu-west")
    assert codes(plan) == [Unsafe.NO_ACTIVE_ENDPOINT] and not plan.forceable


def test_a_second_drill_in_a_region_is_never_forceable(
    world: Any, healthy: Callable[..., float], admin_client: Any
) -> None:
    healthy()
    assert api_drill(admin_client, kind="latency", target="euw-2", duration_s=30).status_code == 201
    plan = plan_of("endpoint_failure", "euw-1")
    assert codes(plan) == [Unsafe.DRILL_UNDER_WAY] and not plan.forceable


def test_paused_failover_is_forceable(world: Any, healthy: Callable[..., float]) -> None:
    from regions.models import Region

    Region.objects.filter(name="eu-west").update(failover_paused=True)
    healthy()
    plan = plan_of("endpoint_failure", "euw-1")
    assert codes(plan) == [Unsafe.FAILOVER_PAUSED] and plan.forceable


def test_a_region_down_already_is_forceable(world: Any, healthy: Callable[..., float]) -> None:
    healthy(probe_ok=False)
    plan = plan_of("agent_silence", "eu-west")
    assert Unsafe.REGION_DOWN in codes(plan) and plan.forceable


def test_short_capacity_is_forceable(world: Any, healthy: Callable[..., float]) -> None:
    healthy(kv=0.6)
    plan = plan_of("region_outage", "eu-west")
    assert codes(plan) == [Unsafe.CAPACITY_SHORT] and plan.forceable
    fleet = plan.capacity[0]
    assert fleet.demand is not None and fleet.after < fleet.demand * 1.1


def test_short_capacity_in_a_strict_zone_is_forceable(request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("eu_fleet")(kv=0.3)
    plan = plan_of("region_outage", "eu-west")
    assert codes(plan) == [Unsafe.ZONE_CAPACITY_SHORT] and plan.forceable
    zone = plan.capacity[1]
    assert zone.scope == "residency rule gdpr (EU → eu-central, eu-west)"
    assert (zone.after, zone.demand) == (1400.0, 6180.0)


def test_stranding_a_zone_is_forceable_and_refused_by_name(
    world: Any, healthy: Callable[..., float]
) -> None:
    from regions.drills import service
    from regions.errors import UnsafePlan
    from regions.fleet.actionplan import StrandedZone
    from regions.models import Drill, DrillStatus

    healthy()
    plan = plan_of("region_outage", "ap-south")
    assert Unsafe.RESIDENCY_STRANDED in codes(plan) and plan.forceable
    assert StrandedZone("india-local", "IN", "llama-3-70b") in plan.stranded
    with pytest.raises(service.DrillRefused) as info:
        service.create_drill("region_outage", "ap-south", 10)
    assert isinstance(info.value, UnsafePlan) and info.value.code == "drill_refused"
    assert "residency_stranded" in info.value.unsafe
    assert info.value.detail.startswith("drill refused: ")
    assert Drill.objects.get(pk=info.value.extra["id"]).status == DrillStatus.REFUSED
    forced = service.create_drill("region_outage", "ap-south", 10, force=True, may_force=True)
    assert forced.status == DrillStatus.PENDING and forced.forced
