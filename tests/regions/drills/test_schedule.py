"""Scheduled practice runs: an opt-in beat entry per target, the same guardrails, history."""

from __future__ import annotations

from typing import Any

import pytest

from regions.drills import runner, tasks
from regions.models import Drill, DrillStatus
from tests.regions.drills.conftest import REAL_DISPATCH  # imported before any test patches dispatch


def test_the_schedule_is_read_strictly() -> None:
    items = tasks.parse_schedule("eu-west:region_outage:30:86400, euw-1:latency:20:3600")
    assert [(i.target, i.kind, i.duration_s, i.every_s) for i in items] == [
        ("eu-west", "region_outage", 30.0, 86400.0),
        ("euw-1", "latency", 20.0, 3600.0),
    ]
    assert tasks.parse_schedule("") == []
    for bad in (
        "eu-west:region_outage:30",
        "eu-west:meteor:30:86400",
        "eu-west:region_outage:0:86400",
        "eu-west:region_outage:30:60",
        "eu-west:region_outage:thirty:86400",
    ):
        with pytest.raises(ValueError, match="drill schedule entry"):
            tasks.parse_schedule(bad)


def test_beat_runs_the_configured_drills_and_the_reaper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAFFICMGR_DRILL_SCHEDULE", "eu-west:region_outage:30:86400")
    entries = tasks.beat_schedule()
    assert entries["trafficmgr-drill-reaper"]["task"] == "regions.drills.reap"
    entry = entries["trafficmgr-drill-eu-west-region_outage"]
    assert entry["task"] == "regions.drills.scheduled"
    assert entry["args"] == ("eu-west", "region_outage", 30.0)
    assert entry["schedule"] == 86400.0
    monkeypatch.setenv("TRAFFICMGR_DRILL_SCHEDULE", "nonsense")
    assert list(tasks.beat_schedule()) == ["trafficmgr-drill-reaper"]


@pytest.mark.django_db
def test_a_scheduled_drill_passes_the_guardrails_and_is_kept(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []
    monkeypatch.setattr(runner, "run_drill", lambda drill_id: ran.append(drill_id))
    assert tasks.scheduled("us-east", "region_outage", 30) is None  # drained: refused
    refused = Drill.objects.get()
    assert refused.status == DrillStatus.REFUSED and refused.created_by == "schedule"
    drill_id = tasks.scheduled("eu-west", "latency", 20)
    assert drill_id is not None and ran == [drill_id]
    assert Drill.objects.get(pk=drill_id).created_by == "schedule"
    assert tasks.scheduled("mars", "latency", 20) is None  # invalid: logged, nothing kept
    assert Drill.objects.count() == 2


@pytest.mark.django_db
def test_distributed_dispatch_queues_the_task_once_committed(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(tasks, "eager", lambda: False)

    class Task:
        def apply_async(self, args: Any, **options: Any) -> None:
            sent.append((args, options))

    monkeypatch.setattr(tasks, "run", Task())
    with django_capture_on_commit_callbacks(execute=True):
        REAL_DISPATCH(41)
        assert sent == []  # not before the drill's row is committed
    assert sent == [((41,), {"expires": 30.0})]
