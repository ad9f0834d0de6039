"""Every drill ends by restoring its fault: on abort, and when its runner is gone."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from regions.drills import service
from regions.drills.measure import MeasureSetup
from regions.drills.runner import run_drill
from regions.models import Drill, DrillStatus, Event, EventKind
from tests.regions.drills.conftest import RecordingHotState, api_drill
from tests.regions.loop.conftest import wait_for

QUIET = MeasureSetup(dns=None, route_url=None, baseline_s=0.1)


def start_runner(drill_id: int) -> threading.Thread:
    def run() -> None:
        try:
            run_drill(drill_id, QUIET)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db
def test_a_dead_runners_probe_token_is_revoked_on_rollback(
    world: Any, store: RecordingHotState
) -> None:
    from regions.access.issue import create_token
    from regions.models import ApiToken

    dangling = stored_drill(DrillStatus.RUNNING, ["euw-1"])
    issued, _ = create_token(service.probe_token_name(dangling.pk), "viewer", created_by="drill")
    other, _ = create_token("drill 9999 route probes", "viewer", created_by="drill")

    assert service.rollback_dangling_drills() == [dangling.pk]

    assert ApiToken.objects.get(pk=issued.pk).revoked_at is not None
    assert ApiToken.objects.get(pk=other.pk).revoked_at is None


@pytest.mark.django_db(transaction=True)
def test_abort_rolls_the_fault_back(
    world: Any,
    healthy: Callable[..., float],
    operator_client: Any,
    store: RecordingHotState,
) -> None:
    healthy()
    created = api_drill(operator_client, kind="region_outage", target="eu-west", duration_s=30)
    assert created.status_code == 201, created.content
    drill_id = created.json()["id"]
    runner = start_runner(drill_id)
    wait_for(lambda: "report_unhealthy" in store.kinds_for("euw-1"), timeout=10, step=0.05)
    assert Drill.objects.get(pk=drill_id).status == DrillStatus.RUNNING

    response = operator_client.post(f"/api/v1/drills/{drill_id}/abort")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "aborted"
    runner.join(10)
    assert not runner.is_alive()

    for name in ("euw-1", "euw-2"):
        assert store.kinds_for(name)[-1] == "none"
        assert store.pop_drill(name) == {"kind": "none", "id": f"drill-{drill_id}-end"}
    drill = Drill.objects.get(pk=drill_id)
    assert drill.status == DrillStatus.ABORTED and drill.finished_at is not None
    assert "aborted by" in drill.reason
    report = drill.report.report
    assert report["verdict"] == "aborted"
    assert report["reasons"][0] == drill.reason
    messages = list(
        Event.objects.filter(kind=EventKind.DRILL, data__drill=drill_id).values_list(
            "message", flat=True
        )
    )
    assert any("started" in m for m in messages) and any("aborted" in m for m in messages)
    again = operator_client.post(f"/api/v1/drills/{drill_id}/abort")
    assert again.status_code == 409


@pytest.mark.django_db
def test_aborting_a_drill_nobody_runs_writes_its_report(
    world: Any, operator_client: Any, store: RecordingHotState
) -> None:
    created = api_drill(operator_client, kind="latency", target="euw-1", duration_s=20)
    drill_id = created.json()["id"]
    response = operator_client.post(f"/api/v1/drills/{drill_id}/abort/")
    assert response.status_code == 200
    assert store.kinds_for("euw-1") == ["none"]
    assert Drill.objects.get(pk=drill_id).report.report["verdict"] == "aborted"
    assert run_drill(drill_id, QUIET) is None  # an aborted drill never starts


@pytest.mark.django_db
def test_abort_of_unknown_drill_is_404(
    world: Any, operator_client: Any, viewer_client: Any
) -> None:
    assert operator_client.post("/api/v1/drills/999999/abort").status_code == 404
    created = api_drill(operator_client, kind="latency", target="euw-1", duration_s=20)
    response = viewer_client.post(f"/api/v1/drills/{created.json()['id']}/abort")
    assert response.status_code == 403


def stored_drill(status: str, endpoints: list[str], age_s: float = 0.0) -> Drill:
    drill = Drill.objects.create(
        kind="region_outage",
        target="eu-west",
        duration_s=30,
        status=status,
        params={"resolved": {"region": "eu-west", "endpoints": endpoints}},
        started_at=timezone.now() if status == DrillStatus.RUNNING else None,
    )
    if age_s:
        old = timezone.now() - dt.timedelta(seconds=age_s)
        Drill.objects.filter(pk=drill.pk).update(created_at=old)
    return drill


@pytest.mark.django_db
def test_dangling_drills_are_rolled_back_on_start(world: Any, store: RecordingHotState) -> None:
    dangling = stored_drill(DrillStatus.RUNNING, ["euw-1", "euw-2"])
    live = stored_drill(DrillStatus.RUNNING, ["aps-1"])
    service.mark_alive(live.pk)
    queued = stored_drill(DrillStatus.PENDING, ["use-1"])
    forgotten = stored_drill(DrillStatus.PENDING, ["use-2"], age_s=600)

    rolled = service.rollback_dangling_drills()

    assert sorted(rolled) == sorted([dangling.pk, forgotten.pk])
    dangling.refresh_from_db()
    assert dangling.status == DrillStatus.ABORTED and "rolled back" in dangling.reason
    assert dangling.report.report["verdict"] == "aborted"
    assert store.kinds_for("euw-1") == ["none"] and store.kinds_for("euw-2") == ["none"]
    assert store.kinds_for("use-2") == ["none"]
    assert store.kinds_for("aps-1") == [] and store.kinds_for("use-1") == []
    assert Drill.objects.get(pk=live.pk).status == DrillStatus.RUNNING
    assert Drill.objects.get(pk=queued.pk).status == DrillStatus.PENDING
    assert Event.objects.filter(kind=EventKind.DRILL, data__drill=dangling.pk).exists()
    # A second start finds nothing left to roll back.
    assert service.rollback_dangling_drills() == []
    # On a restart nothing is alive any more, and nothing is waited for.
    service.mark_gone(live.pk)
    assert sorted(service.rollback_dangling_drills(pending_grace_s=0)) == [live.pk, queued.pk]


@pytest.mark.django_db(transaction=True)
def test_a_runner_keeps_its_drill_alive(
    world: Any, healthy: Callable[..., float], operator_client: Any, store: RecordingHotState
) -> None:
    healthy()
    created = api_drill(
        operator_client,
        kind="agent_silence",
        target="euw-2",
        duration_s=3,
        params={"recovery_wait_s": 1},
    )
    drill_id = created.json()["id"]
    runner = start_runner(drill_id)
    wait_for(lambda: store.kinds_for("euw-2"), timeout=10, step=0.05)
    assert service.rollback_dangling_drills() == []
    assert Drill.objects.get(pk=drill_id).status == DrillStatus.RUNNING
    deadline = time.monotonic() + 30
    while runner.is_alive() and time.monotonic() < deadline:
        healthy(endpoints=("euw-1", "aps-1"))  # the rest of the fleet keeps serving
        runner.join(0.5)
    drill = Drill.objects.get(pk=drill_id)
    assert drill.status == DrillStatus.FINISHED
    # No agent of euw-2 ran: the fault never took effect, and the report says so.
    report = drill.report.report
    assert report["verdict"] == "fail"
    assert any("no agent of euw-2 took the drill instruction" in r for r in report["reasons"])
    assert store.kinds_for("euw-2")[-1] == "none"


@pytest.mark.django_db(transaction=True)
def test_the_guardrails_end_a_drill_when_the_fleet_loses_capacity_meanwhile(
    world: Any, healthy: Callable[..., float], operator_client: Any, store: RecordingHotState
) -> None:
    healthy()
    created = api_drill(operator_client, kind="agent_silence", target="euw-2", duration_s=20)
    drill_id = created.json()["id"]
    runner = start_runner(drill_id)  # and no heartbeats at all from now on: all go stale
    runner.join(20)
    assert not runner.is_alive()
    drill = Drill.objects.get(pk=drill_id)
    assert drill.status == DrillStatus.ABORTED
    assert drill.reason.startswith("aborted by the guardrails during the fault: capacity left")
    assert drill.report.report["verdict"] == "aborted"
    assert store.kinds_for("euw-2")[-1] == "none"
