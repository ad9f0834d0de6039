"""Reading drills through the API: the list with its filters, one drill with its report."""

from __future__ import annotations

from typing import Any

import pytest

from regions.drills import service
from regions.models import Drill, DrillReport, DrillStatus
from tests.regions.drills.conftest import api_drill

pytestmark = pytest.mark.django_db


def test_list_and_detail_with_the_report(
    world: Any, operator_client: Any, viewer_client: Any
) -> None:
    first = api_drill(
        operator_client, kind="latency", target="euw-1", duration_s=10, params={"added_ms": 800}
    )
    assert first.status_code == 201, first.content
    drill_id = first.json()["id"]
    refused = api_drill(operator_client, kind="region_outage", target="us-east", duration_s=10)
    assert refused.status_code == 409

    listed = viewer_client.get("/api/v1/drills/")
    assert listed.status_code == 200
    assert [d["status"] for d in listed.json()["results"]] == ["refused", "pending"]
    only = viewer_client.get("/api/v1/drills/?status=pending&kind=latency&target=euw-1")
    assert [d["id"] for d in only.json()["results"]] == [drill_id]
    assert viewer_client.get("/api/v1/drills/?status=sleeping").status_code == 400
    assert viewer_client.get("/api/v1/drills/?colour=red").status_code == 400

    detail = viewer_client.get(f"/api/v1/drills/{drill_id}/").json()
    assert detail["status"] == "pending" and detail["report"] is None
    assert detail["params"]["added_ms"] == 800
    assert detail["params"]["resolved"] == {"region": "eu-west", "endpoints": ["euw-1"]}

    Drill.objects.filter(pk=drill_id).update(status=DrillStatus.FINISHED)
    DrillReport.objects.create(drill_id=drill_id, report={"verdict": "pass", "kind": "latency"})
    detail = viewer_client.get(f"/api/v1/drills/{drill_id}/").json()
    assert detail["status"] == "finished" and detail["report"]["verdict"] == "pass"
    assert viewer_client.get("/api/v1/drills/424242/").status_code == 404


def test_instructions_follow_the_kind(world: Any) -> None:
    fleet = world
    outage = service.resolve(fleet, "region_outage", "eu-west", 10, None)
    assert (outage.instruction, outage.endpoints, outage.region_out) == (
        "report_unhealthy",
        ("euw-1", "euw-2"),
        True,
    )
    silence = service.resolve(fleet, "agent_silence", "euw-2", 10, None)
    assert (silence.instruction, silence.endpoints, silence.region_out) == (
        "silence",
        ("euw-2",),
        False,
    )
    failure = service.resolve(fleet, "endpoint_failure", "eu-west", 10, {"endpoint": "euw-2"})
    assert failure.endpoints == ("euw-2",)
    slow = service.resolve(fleet, "latency", "eu-west", 10, {"added_ms": 750})
    assert slow.agent_params == {"add_ms": 750.0} and slow.capacity_kept == 1.0
    hot = service.resolve(fleet, "gpu_degraded", "euw-1", 10, None)
    assert hot.instruction == "degrade_gpu" and hot.agent_params == {"gpus": "all"}
    assert 0 < hot.capacity_kept < 1
    broken = service.resolve(fleet, "gpu_degraded", "euw-1", 10, {"xid": 79, "gpus": [0]})
    assert broken.agent_params == {"gpus": [0], "xid": 79} and broken.capacity_kept == 0
    half = service.resolve(fleet, "capacity_loss", "eu-west", 10, {"fraction": 0.5})
    assert half.endpoints == ("euw-1",)  # the largest first
    both = service.resolve(fleet, "capacity_loss", "eu-west", 10, {"count": 2})
    assert both.endpoints == ("euw-1", "euw-2") and both.region_out
