"""Operator actions: plan preview (dry run), the safety valve, audit and events."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.regions.loop.conftest import API

pytestmark = pytest.mark.django_db


@pytest.fixture
def live(feed: Any) -> float:
    from regions.loop.control import run_tick

    now = time.time()
    feed(now)
    run_tick(now)
    return now


def act(client: Any, path: str, body: Any = None, **query: str) -> Any:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    url = f"{API}/{path}" + (f"?{qs}" if qs else "")
    data = json.dumps(body).encode() if body is not None else b""
    return client.generic("POST", url, data, content_type="application/json")


def region(name: str) -> Any:
    from regions.models import Region

    return Region.objects.get(name=name)


def counts() -> tuple[int, int]:
    from regions.models import AuditLog, Event

    return AuditLog.objects.count(), Event.objects.filter(kind="action").count()


def test_dry_run_returns_the_plan_and_changes_nothing(operator_client: Any, live: float) -> None:
    before = counts()
    response = act(operator_client, "regions/eu-west/drain", dry_run="1")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["applied"] is False and body["dry_run"] is True
    plan = body["plan"]
    assert plan["safe"] and 0 < plan["moved_share"] <= 0.5
    gb = [m for m in plan["moves"] if m["zone"] == "GB" and m["model"] == "llama-3-70b"]
    assert gb and {e["region"] for e in gb[0]["after"]} == {"eu-central"}
    assert plan["capacity"]["llama-3-70b"]["left_share"] < 1
    assert plan["residency"] == {"stranded": [], "ok": True}
    assert region("eu-west").admin_state == "active"
    assert counts() == before


def test_drain_applies_audits_and_events(
    operator_client: Any, live: float, fresh_hot_state: Any
) -> None:
    from regions.models import AuditLog, Event

    response = act(operator_client, "regions/eu-west/drain")
    assert response.status_code == 200, response.content
    assert response.json()["applied"] is True
    assert region("eu-west").admin_state == "drained"
    audit = AuditLog.objects.filter(object_type="Region", action="update").latest("id")
    assert audit.actor == "token:test-operator" and audit.after["admin_state"] == "drained"
    event = Event.objects.get(kind="action")
    assert "drain region eu-west" in event.message and event.region == "eu-west"
    from regions.loop.control import run_tick

    run_tick(time.time())
    assert fresh_hot_state.table().regions["eu-west"].state.value == "drained"


def test_undrain_brings_it_back_and_a_repeat_is_a_no_op(operator_client: Any, live: float) -> None:
    act(operator_client, "regions/eu-west/drain")
    response = act(operator_client, "regions/eu-west/undrain")
    assert response.json()["applied"] is True
    assert region("eu-west").admin_state == "active"
    before = counts()
    assert act(operator_client, "regions/eu-west/undrain").json()["applied"] is False
    assert counts() == before


def test_leaving_a_residency_zone_without_region_is_refused(
    operator_client: Any, live: float
) -> None:
    act(operator_client, "regions/eu-west/drain")
    before = counts()
    response = act(operator_client, "regions/eu-central/drain")
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["error"] == "unsafe_change" and "gdpr" in body["detail"]
    assert {"rule": "gdpr", "zone": "EU", "model": "llama-3-70b"} in (
        body["plan"]["residency"]["stranded"]
    )
    assert region("eu-central").admin_state == "active"
    assert counts() == before


def test_only_an_admin_may_force(operator_client: Any, admin_client: Any, live: float) -> None:
    from regions.models import Event

    act(operator_client, "regions/eu-west/drain")
    refused = act(operator_client, "regions/eu-central/drain", force="1")
    assert refused.status_code == 403
    assert region("eu-central").admin_state == "active"
    forced = act(admin_client, "regions/eu-central/drain", force="1")
    assert forced.status_code == 200, forced.content
    assert region("eu-central").admin_state == "drained"
    event = Event.objects.filter(kind="action", region="eu-central").get()
    assert event.severity == "warning" and "forced" in event.message


def test_moving_more_than_half_of_all_traffic_is_refused(operator_client: Any, live: float) -> None:
    from regions.models import FleetSettings

    fleet = FleetSettings.current()
    fleet.clients = [{"country": "US", "share": 0.9}, {"country": "GB", "share": 0.1}]
    fleet.save()
    plan = act(operator_client, "regions/us-east/drain", dry_run="1").json()["plan"]
    assert plan["moved_share"] > 0.5 and not plan["safe"]
    response = act(operator_client, "regions/us-east/drain")
    assert response.status_code == 409
    assert "of all traffic" in response.json()["detail"]
    assert region("us-east").admin_state == "active"


def test_weight(operator_client: Any, live: float) -> None:
    response = act(operator_client, "regions/eu-west/weight", {"weight": 0.25})
    assert response.status_code == 200, response.content
    assert region("eu-west").weight == 0.25
    assert response.json()["plan"]["change"]["weight"] == 0.25


@pytest.mark.parametrize(
    "body", [{"weight": -1}, {"weight": "1"}, {"weight": 1e9}, {}, {"weight": 1, "why": "x"}, None]
)
def test_bad_weights_name_the_field(operator_client: Any, live: float, body: Any) -> None:
    response = act(operator_client, "regions/eu-west/weight", body)
    assert response.status_code == 400, response.content
    assert response.json()["fields"], response.json()
    assert region("eu-west").weight == 1.0


def test_pause_and_resume_failover(operator_client: Any, live: float) -> None:
    assert act(operator_client, "regions/us-east/pause-failover").json()["applied"]
    assert region("us-east").failover_paused
    assert act(operator_client, "regions/us-east/resume-failover/").json()["applied"]
    assert not region("us-east").failover_paused


def test_endpoint_drain(operator_client: Any, live: float) -> None:
    from regions.models import Endpoint

    response = act(operator_client, "endpoints/euw-2/drain")
    assert response.status_code == 200, response.content
    assert Endpoint.objects.get(name="euw-2").admin_state == "drained"
    assert act(operator_client, "endpoints/euw-2/undrain").json()["applied"]
    assert Endpoint.objects.get(name="euw-2").admin_state == "active"


def test_viewers_and_agents_may_not_act(viewer_client: Any, agent_api: Any, live: float) -> None:
    assert act(viewer_client, "regions/eu-west/drain").status_code == 403
    assert act(viewer_client, "regions/eu-west/drain", dry_run="1").status_code == 403
    assert act(agent_api("eu-west"), "regions/eu-west/drain").status_code == 403
    assert region("eu-west").admin_state == "active"


def test_unknown_targets(operator_client: Any, live: float) -> None:
    assert act(operator_client, "regions/mars-1/drain").status_code == 404
    assert act(operator_client, "endpoints/nope/drain", dry_run="1").status_code == 404
