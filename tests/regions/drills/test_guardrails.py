"""The guardrails refuse unsafe drills (stored as ``refused``, with an Event); admins may force
past capacity and residency, never past a drained target or an overlap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from regions.models import Drill, DrillStatus, Event, EventKind, Region
from tests.regions.drills.conftest import api_drill
from tests.worlds import GDPR_SHORT

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
    from regions.fleet import snapshot

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
    from regions.drills.measure import MeasureSetup
    from regions.drills.runner import run_drill

    healthy()
    created = api_drill(operator_client, kind="endpoint_failure", target="euw-1", duration_s=10)
    Region.objects.filter(name="eu-west").update(admin_state="drained")
    from regions.fleet import snapshot

    snapshot.forget()
    report = run_drill(created.json()["id"], MeasureSetup(dns=None))
    assert report is not None and report["verdict"] == "aborted"
    assert report["reasons"] == ["refused at start by the guardrails: region eu-west is drained"]
    assert Drill.objects.get(pk=created.json()["id"]).status == DrillStatus.ABORTED


def test_a_drill_whose_target_left_the_fleet_is_abandoned(world: Any, operator_client: Any) -> None:
    from regions.drills.measure import MeasureSetup
    from regions.drills.runner import run_drill
    from regions.models import Endpoint

    created = api_drill(operator_client, kind="latency", target="euw-2", duration_s=10)
    Endpoint.objects.filter(name="euw-2").delete()
    from regions.fleet import snapshot

    snapshot.forget()
    assert run_drill(created.json()["id"], MeasureSetup(dns=None)) is None
    drill = Drill.objects.get(pk=created.json()["id"])
    assert drill.status == DrillStatus.ABORTED
    assert "could not start: target: no region or endpoint is named 'euw-2'" in drill.reason
    assert drill.report.report["verdict"] == "aborted"


# --- capacity per strict residency zone (tests/worlds.py GDPR_SHORT) ----------------------
EU_REGION_OF = {"euw-1": "eu-west", "euc-1": "eu-central", "use-1": "us-east", "use-2": "us-east"}


@pytest.fixture
def eu_fleet(db: None) -> Callable[..., float]:
    """Apply GDPR_SHORT; returns ``beat(endpoints=all, **doc_args)``: heartbeats, then a tick."""
    import json
    import time

    from regions.access.issue import create_token
    from regions.audit.trail import acting_as
    from regions.fleet import snapshot
    from regions.fleet.plan import apply_plan, plan_fleet
    from regions.loop import ingest
    from regions.loop.control import run_tick
    from tests.regions.loop.conftest import hb_doc
    from trafficmgr.fleetfile import load_fleet_text

    with acting_as("fixture:eu-fleet", "system"):
        apply_plan(plan_fleet(load_fleet_text(GDPR_SHORT)))
    snapshot.forget()
    tokens = {
        r: create_token(f"agent-{r}", "agent", region=r, created_by="tests")[0]
        for r in sorted(set(EU_REGION_OF.values()))
    }

    def beat(endpoints: tuple[str, ...] = tuple(EU_REGION_OF), **kwargs: Any) -> float:
        kwargs = {"running": 2, "util": 5.0, **kwargs}
        at = time.time()
        for name in endpoints:
            body = json.dumps(hb_doc(name, int(at * 1000), at, **kwargs)).encode()
            assert ingest.ingest(tokens[EU_REGION_OF[name]], body, at).accepted
        run_tick(at)
        return at

    return beat


def test_a_strict_zone_left_short_is_refused_though_the_fleet_has_plenty(
    eu_fleet: Callable[..., float], operator_client: Any, admin_client: Any
) -> None:
    eu_fleet(kv=0.3)  # demand: 30 % of every region's capacity
    response = api_drill(operator_client, kind="region_outage", target="eu-west", duration_s=10)
    drill = refused(response, "residency rule gdpr (EU → eu-central, eu-west)")
    assert "would not cover the demand" not in drill.reason  # the fleet as a whole copes
    assert "1,400 tokens/s) would not cover their demand (6,180 tokens/s) plus 10%" in (
        drill.reason
    )
    figures = drill.params["guardrails"]
    assert figures["capacity_during_fault_tokens_per_s"] >= figures["demand_tokens_per_s"] * 1.1
    assert figures["residency_zones"] == [
        {
            "rule": "gdpr",
            "zones": ["EU"],
            "regions": ["eu-central", "eu-west"],
            "demand_tokens_per_s": 6180.0,
            "capacity_during_fault_tokens_per_s": 1400.0,
        }
    ]
    forced = api_drill(
        admin_client, kind="region_outage", target="eu-west", duration_s=10, force=True
    )
    assert forced.status_code == 201, forced.content
    assert Drill.objects.get(pk=forced.json()["id"]).forced


def test_a_drill_outside_a_strict_zones_regions_is_not_held_by_it(
    eu_fleet: Callable[..., float], operator_client: Any
) -> None:
    eu_fleet(kv=0.3)
    response = api_drill(operator_client, kind="region_outage", target="us-east", duration_s=10)
    assert response.status_code == 201, response.content
    assert Drill.objects.get(pk=response.json()["id"]).params["guardrails"]["residency_zones"] == []


def test_a_strict_zone_with_room_passes_and_the_fault_rechecks_it(
    eu_fleet: Callable[..., float], operator_client: Any
) -> None:
    from regions.drills import guardrails as drill_guardrails
    from regions.drills.spec import resolve
    from regions.fleet import snapshot

    eu_fleet(kv=0.05)  # EU demand 1,030 tokens/s: eu-central alone covers it plus 10 %
    response = api_drill(operator_client, kind="region_outage", target="eu-west", duration_s=10)
    assert response.status_code == 201, response.content
    figures = Drill.objects.get(pk=response.json()["id"]).params["guardrails"]
    (zone,) = figures["residency_zones"]
    assert (zone["demand_tokens_per_s"], zone["capacity_during_fault_tokens_per_s"]) == (
        1030.0,
        1400.0,
    )
    spec = resolve(snapshot.current().fleet, "region_outage", "eu-west", 10, None)
    at = eu_fleet(kv=0.05)
    assert drill_guardrails.during(spec, figures, at) == []
    # eu-central fails meanwhile: the EU clients have nowhere left, us-east has plenty.
    at = eu_fleet(("euw-1", "use-1", "use-2"), kv=0.05)
    eu_fleet(("euc-1",), kv=0.05, probe_ok=False)
    zone_reason, *others = drill_guardrails.during(spec, figures, at)
    assert zone_reason.startswith("residency rule gdpr (EU → eu-central, eu-west): capacity left")
    assert "(0 tokens/s) fell below their demand before the drill (1,030 tokens/s)" in zone_reason
    assert not any(r.startswith("capacity left") for r in others)  # the fleet still copes


def test_each_strict_rule_is_checked_in_the_regions_the_engine_allows_its_zones() -> None:
    from regions.drills.guardrails import strict_zones
    from trafficmgr.fleetfile import load_fleet_text

    text = GDPR_SHORT.replace(
        "  - {name: gdpr, clients: {continents: [EU]}",
        "  - {name: de-local, clients: {countries: [DE]}, regions: [eu-central], mode: strict}\n"
        "  - {name: nl-pref, clients: {countries: [NL]}, regions: [eu-west], mode: preferred}\n"
        "  - {name: gdpr, clients: {countries: [DE, FR], continents: [EU]}",
    )
    assert strict_zones(load_fleet_text(text)) == [
        ("de-local", ("DE",), ("eu-central",)),
        ("gdpr", ("DE",), ("eu-central",)),  # German clients are bound by both rules
        ("gdpr", ("FR", "EU"), ("eu-west", "eu-central")),
    ]
