"""An operator action's plan names why it is unsafe, and the valve refuses by those names."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def live(feed: Any) -> float:
    from regions.loop.control import run_tick

    now = time.time()
    feed(now)
    run_tick(now)
    return now


def action(verb: str, target: str, kind: str = "region") -> Any:
    from regions.loop.actions import OperatorAction

    return OperatorAction(verb, kind, target)


def test_a_safe_drain_states_what_moves_and_what_capacity_is_left(live: float) -> None:
    from regions.loop.actions import make_plan

    plan = make_plan(action("drain", "eu-west"), live)
    assert plan.safe and plan.subject == "drain region eu-west"
    assert 0 < plan.moved_share <= 0.5
    gb = [c for c in plan.traffic if (c.zone, c.model) == ("GB", "llama-3-70b")]
    assert gb and {w.region for w in gb[0].new} == {"eu-central"}
    assert [(c.region, c.new.value if c.new else None) for c in plan.states] == [
        ("eu-west", "drained")
    ]
    capacity = {c.scope: c for c in plan.capacity}
    assert capacity["llama-3-70b"].after < capacity["llama-3-70b"].before
    assert plan.stranded == ()


def test_stranding_a_residency_zone_is_refused_by_name(live: float) -> None:
    from regions.audit.trail import acting_as
    from regions.fleet.actionplan import StrandedZone, Unsafe
    from regions.loop.actions import UnsafeChange, make_plan, perform
    from regions.models import Region

    with acting_as("cli:tests"):
        perform(action("drain", "eu-west"), dry_run=False, force=False, may_force=False)
    plan = make_plan(action("drain", "eu-central"))
    assert StrandedZone("gdpr", "EU", "llama-3-70b") in plan.stranded
    assert Unsafe.RESIDENCY_STRANDED in {r.code for r in plan.unsafe}
    assert plan.forceable
    with pytest.raises(UnsafeChange) as info, acting_as("cli:tests"):
        perform(action("drain", "eu-central"), dry_run=False, force=False, may_force=False)
    error = info.value
    assert (error.status_code, error.code) == (409, "unsafe_change")
    assert "residency_stranded" in error.unsafe
    assert error.detail.endswith("; add ?force=1 (admin) to apply anyway")
    assert error.extra["plan"]["residency"]["ok"] is False
    assert Region.objects.get(name="eu-central").admin_state == "active"


def test_force_needs_an_admin_and_then_passes_the_valve(live: float) -> None:
    from regions.audit.trail import acting_as
    from regions.errors import DomainError
    from regions.loop.actions import perform
    from regions.models import Event, Region

    with acting_as("cli:tests"):
        perform(action("drain", "eu-west"), dry_run=False, force=False, may_force=True)
        with pytest.raises(DomainError) as info:
            perform(action("drain", "eu-central"), dry_run=False, force=True, may_force=False)
        assert info.value.status_code == 403
        body = perform(action("drain", "eu-central"), dry_run=False, force=True, may_force=True)
    assert body["applied"] is True and body["plan"]["safe"] is False
    assert Region.objects.get(name="eu-central").admin_state == "drained"
    event = Event.objects.get(kind="action", region="eu-central")
    assert event.data["forced"] is True
    assert event.data["plan"]["refusals"] == body["plan"]["refusals"]


def test_moving_most_of_the_traffic_is_refused_by_name(live: float) -> None:
    from regions.fleet.actionplan import Unsafe
    from regions.loop.actions import make_plan
    from regions.models import FleetSettings

    fleet = FleetSettings.current()
    fleet.clients = [{"country": "US", "share": 0.9}, {"country": "GB", "share": 0.1}]
    fleet.save()
    plan = make_plan(action("drain", "us-east"))
    assert plan.moved_share > 0.5
    assert [r.code for r in plan.unsafe] == [Unsafe.TRAFFIC_MOVED]
    assert plan.reasons() == [f"moves {plan.moved_share:.0%} of all traffic (more than 50%)"]


def test_a_pause_moves_nothing_and_is_safe(live: float) -> None:
    from regions.loop.actions import make_plan

    plan = make_plan(action("pause-failover", "us-east"))
    assert plan.safe and plan.moved_share == 0 and plan.traffic == ()
