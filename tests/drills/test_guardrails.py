"""The guardrails refuse unsafe drills (stored as ``refused``, with an Event); admins may force
past capacity and residency, never past a drained target or an overlap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from regions.models import Drill, DrillStatus, Event, EventKind, Region
from tests.drills.conftest import api_drill

pytestmark = pytest.mark.django_db


def refused(response: Any, words: str) -> Drill:
    assert response.status_code == 409, response.content
    doc = response.json()
    assert doc["error"] == "drill_refused" and doc["status"] == "refused"
    assert words in doc["detail"], doc["detail"]
    drill = Drill.objects.get(pk=doc["id"])
    assert drill.status == DrillStatus.REFUSED and words in drill.reason
    assert drill.finished_at is not None
    assert Event.objects.filter(kind=EventKind.DRILL, data__drill=drill.pk).exists()
    return drill


def test_a_safe_drill_is_stored_pending_and_started(
    world: Any, healthy: Callable[..., float], operator_client: Any, dispatched: list[int]
) -> None:
    healthy()
    response = api_drill(operator_client, kind="region_outage", target="eu-west", duration_s=10)
    assert response.status_code == 201, response.content
    doc = response.json()
    assert doc["status"] == "pending"
    assert dispatched == [doc["id"]]
    drill = Drill.objects.get(pk=doc["id"])
    assert drill.params["resolved"] == {"region": "eu-west", "endpoints": ["euw-1", "euw-2"]}
    assert drill.params["guardrails"]["demand_tokens_per_s"] > 0


def test_a_drained_region_is_refused_even_when_forced(world: Any, admin_client: Any) -> None:
    response = api_drill(admin_client, kind="region_outage", target="us-east", duration_s=10)
    refused(response, "us-east is drained")
    response = api_drill(
        admin_client, kind="endpoint_failure", target="use-1", duration_s=10, force=True
    )
    refused(response, "us-east is drained")


def test_overlapping_drills_on_one_region_are_refused(
    world: Any, healthy: Callable[..., float], admin_client: Any, dispatched: list[int]
) -> None:
    healthy()
    first = api_drill(admin_client, kind="latency", target="euw-2", duration_s=30)
    assert first.status_code == 201
    second = api_drill(admin_client, kind="endpoint_failure", target="euw-1", duration_s=10)
    refused(second, f"drill {first.json()['id']} is already under way in region eu-west")
    forced = api_drill(
        admin_client, kind="region_outage", target="eu-west", duration_s=10, force=True
    )
    refused(forced, "already under way")
    assert dispatched == [first.json()["id"]]


def test_a_drill_leaving_a_strict_residency_zone_without_region_is_refused(
    world: Any, healthy: Callable[..., float], operator_client: Any, admin_client: Any
) -> None:
    healthy()
    response = api_drill(operator_client, kind="region_outage", target="ap-south", duration_s=10)
    drill = refused(response, "residency zone IN (rule india-local)")
    assert drill.params["guardrails"]["stranded"][0]["zone"] == "IN"
    # Slower answers do not strand anyone: a latency drill on the same region is fine.
    ok = api_drill(operator_client, kind="latency", target="ap-south", duration_s=10)
    assert ok.status_code == 201, ok.content
    Drill.objects.filter(pk=ok.json()["id"]).update(status=DrillStatus.FINISHED)
    forced = api_drill(
        admin_client, kind="region_outage", target="ap-south", duration_s=10, force=True
    )
    assert forced.status_code == 201, forced.content
    assert Drill.objects.get(pk=forced.json()["id"]).forced


def test_residency_is_checked_before_any_heartbeat_too(world: Any, operator_client: Any) -> None:
    response = api_drill(operator_client, kind="agent_silence", target="aps-1", duration_s=10)
    refused(response, "residency zone IN")


def test_capacity_left_must_cover_the_demand(
    world: Any, healthy: Callable[..., float], operator_client: Any
) -> None:
    healthy(kv=0.6)
    response = api_drill(operator_client, kind="region_outage", target="eu-west", duration_s=10)
    drill = refused(response, "would not cover the demand")
    figures = drill.params["guardrails"]
    assert figures["capacity_during_fault_tokens_per_s"] < figures["demand_tokens_per_s"] * 1.1
    # Losing one of eu-west's two endpoints leaves enough.
    ok = api_drill(operator_client, kind="endpoint_failure", target="euw-2", duration_s=10)
    assert ok.status_code == 201, ok.content


def test_a_region_with_failover_paused_is_refused(
    world: Any, healthy: Callable[..., float], operator_client: Any
) -> None:
    Region.objects.filter(name="eu-west").update(failover_paused=True)
    from regions import snapshot

    snapshot.forget()
    healthy()
    response = api_drill(operator_client, kind="endpoint_failure", target="euw-1", duration_s=10)
    refused(response, "failover is paused for eu-west")


def test_a_region_already_down_is_refused(
    world: Any, healthy: Callable[..., float], operator_client: Any
) -> None:
    healthy(probe_ok=False)
    response = api_drill(operator_client, kind="agent_silence", target="eu-west", duration_s=10)
    refused(response, "eu-west is down already")


def test_the_guardrails_are_checked_again_when_the_drill_starts(
    world: Any, healthy: Callable[..., float], operator_client: Any
) -> None:
    from regions.drill_measure import MeasureSetup
    from regions.drill_runner import run_drill

    healthy()
    created = api_drill(operator_client, kind="endpoint_failure", target="euw-1", duration_s=10)
    Region.objects.filter(name="eu-west").update(admin_state="drained")
    from regions import snapshot

    snapshot.forget()
    report = run_drill(created.json()["id"], MeasureSetup(dns=None))
    assert report is not None and report["verdict"] == "aborted"
    assert report["reasons"] == ["refused at start by the guardrails: region eu-west is drained"]
    assert Drill.objects.get(pk=created.json()["id"]).status == DrillStatus.ABORTED


def test_a_drill_whose_target_left_the_fleet_is_abandoned(world: Any, operator_client: Any) -> None:
    from regions.drill_measure import MeasureSetup
    from regions.drill_runner import run_drill
    from regions.models import Endpoint

    created = api_drill(operator_client, kind="latency", target="euw-2", duration_s=10)
    Endpoint.objects.filter(name="euw-2").delete()
    from regions import snapshot

    snapshot.forget()
    assert run_drill(created.json()["id"], MeasureSetup(dns=None)) is None
    drill = Drill.objects.get(pk=created.json()["id"])
    assert drill.status == DrillStatus.ABORTED
    assert "could not start: target: no region or endpoint is named 'euw-2'" in drill.reason
    assert drill.report.report["verdict"] == "aborted"
