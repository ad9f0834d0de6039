"""Bad drill requests are 400s naming the field, and store nothing."""

from __future__ import annotations

from typing import Any

import pytest

from regions.models import Drill
from tests.regions.drills.conftest import api_drill

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "meteor_strike", "target": "eu-west", "duration_s": 10}, "kind"),
        ({"kind": "region_outage", "target": "mars-1", "duration_s": 10}, "target"),
        ({"kind": "region_outage", "target": "euw-1", "duration_s": 10}, "target"),
        ({"kind": "capacity_loss", "target": "euw-1", "duration_s": 10}, "target"),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": 0}, "duration_s"),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": 7 * 86400}, "duration_s"),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": -5}, "duration_s"),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": "30"}, "duration_s"),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": True}, "duration_s"),
        ({"kind": "region_outage", "target": "eu-west"}, "duration_s"),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": 10, "when": 1}, "when"),
        (
            {"kind": "region_outage", "target": "eu-west", "duration_s": 10, "params": {"x": 1}},
            "params.x",
        ),
        (
            {"kind": "latency", "target": "eu-west", "duration_s": 10, "params": {"added_ms": -3}},
            "params.added_ms",
        ),
        (
            {
                "kind": "capacity_loss",
                "target": "eu-west",
                "duration_s": 10,
                "params": {"count": 5},
            },
            "params.count",
        ),
        (
            {
                "kind": "endpoint_failure",
                "target": "eu-west",
                "duration_s": 10,
                "params": {"endpoint": "aps-1"},
            },
            "params.endpoint",
        ),
        ({"kind": "region_outage", "target": "eu-west", "duration_s": 10, "force": "yes"}, "force"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    world: Any, operator_client: Any, dispatched: list[int], body: dict[str, Any], field: str
) -> None:
    response = api_drill(operator_client, **body)
    assert response.status_code == 400, response.content
    doc = response.json()
    assert doc["error"] == "invalid"
    assert field in doc["fields"], doc
    assert not Drill.objects.exists()
    assert dispatched == []


def test_body_must_be_a_json_object(world: Any, operator_client: Any) -> None:
    for raw in (b"[1, 2]", b"{bad json", b'"region_outage"'):
        response = operator_client.post(
            "/api/v1/drills/", data=raw, content_type="application/json"
        )
        assert response.status_code == 400, raw


def test_viewers_may_not_start_drills(world: Any, viewer_client: Any) -> None:
    response = api_drill(viewer_client, kind="region_outage", target="eu-west", duration_s=10)
    assert response.status_code == 403
    assert not Drill.objects.exists()


def test_only_admins_may_force(world: Any, operator_client: Any) -> None:
    response = api_drill(
        operator_client, kind="region_outage", target="eu-west", duration_s=10, force=True
    )
    assert response.status_code == 403
    assert response.json()["error"] == "permission_denied"
    assert not Drill.objects.exists()
