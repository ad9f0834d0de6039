"""``POST /api/v1/drills/?dry_run=1``: what the guardrails say of a drill, starting nothing.

The dashboard's drills panel shows it before an operator starts a drill: allowed or not, each
refusal with whether an admin may force it, and the figures behind them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from regions.models import AuditLog, Drill, Event
from tests.regions.drills.conftest import RecordingHotState

pytestmark = pytest.mark.django_db


def preview(client: Any, query: str = "?dry_run=1", **body: Any) -> Any:
    return client.post(
        f"/api/v1/drills/{query}", data=json.dumps(body), content_type="application/json"
    )


def nothing_happened(store: RecordingHotState, dispatched: list[int]) -> None:
    assert not Drill.objects.exists()
    assert not Event.objects.filter(kind="drill").exists()
    assert not AuditLog.objects.filter(object_type="Drill").exists()
    assert dispatched == [] and store.instructions == []


def test_a_safe_drill_is_previewed_as_allowed_with_its_figures(
    world: Any,
    healthy: Callable[..., float],
    operator_client: Any,
    store: RecordingHotState,
    dispatched: list[int],
) -> None:
    healthy()
    response = preview(operator_client, kind="region_outage", target="eu-west", duration_s=10)
    assert response.status_code == 200, response.content
    doc = response.json()
    assert doc["dry_run"] is True and doc["allowed"] is True and doc["refusals"] == []
    assert doc["resolved"] == {"region": "eu-west", "endpoints": ["euw-1", "euw-2"]}
    figures = doc["guardrails"]
    assert figures["demand_tokens_per_s"] > 0
    assert figures["capacity_during_fault_tokens_per_s"] < figures["capacity_tokens_per_s"]
    nothing_happened(store, dispatched)
    assert (
        preview(
            operator_client,
            "?dry_run=0",
            **{"kind": "region_outage", "target": "eu-west", "duration_s": 10},
        ).status_code
        == 201
    )  # without the flag, the drill is stored and started


def test_refusals_say_whether_an_admin_may_force_them(
    world: Any,
    healthy: Callable[..., float],
    operator_client: Any,
    admin_client: Any,
    store: RecordingHotState,
    dispatched: list[int],
) -> None:
    healthy()
    drained = preview(operator_client, kind="region_outage", target="us-east", duration_s=10)
    assert drained.status_code == 200
    assert drained.json()["allowed"] is False and drained.json()["forceable"] is False
    assert drained.json()["refusals"] == [
        {"reason": "region us-east is drained", "forceable": False}
    ]

    strands = preview(operator_client, kind="region_outage", target="ap-south", duration_s=10)
    doc = strands.json()
    assert doc["allowed"] is False and doc["forceable"] is True
    assert any("residency zone IN" in r["reason"] for r in doc["refusals"])
    assert doc["guardrails"]["stranded"][0]["zone"] == "IN"

    body = {"kind": "region_outage", "target": "ap-south", "duration_s": 10}
    assert preview(operator_client, "?dry_run=1&force=1", **body).status_code == 403
    forced = preview(admin_client, "?dry_run=1&force=1", **body).json()
    assert forced["allowed"] is True and forced["forced"] is True
    nothing_happened(store, dispatched)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "meteor", "target": "eu-west", "duration_s": 10}, "kind"),
        ({"kind": "latency", "target": "nowhere", "duration_s": 10}, "target"),
        ({"kind": "latency", "target": "eu-west", "duration_s": 9999}, "duration_s"),
        ({"kind": "latency", "target": "eu-west"}, "duration_s"),
        ({"kind": "latency", "target": "eu-west", "duration_s": 5, "colour": 1}, "colour"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    world: Any, operator_client: Any, body: dict[str, Any], field: str
) -> None:
    response = preview(operator_client, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]


def test_a_viewer_may_not_preview(world: Any, viewer_client: Any) -> None:
    response = preview(viewer_client, kind="latency", target="euw-1", duration_s=10)
    assert response.status_code == 403
