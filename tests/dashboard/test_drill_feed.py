"""Drills reach the dashboard: in the snapshot, and as ``drills.update`` while one runs (with
the progress its runner publishes) and when one starts, ends or is refused."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from dashboard import livefeed, messages
from regions.drills import progress
from regions.models import Drill, DrillReport, DrillStatus, Event
from trafficmgr.asgi import application


@pytest.fixture(autouse=True)
def _private_cache(settings: Any) -> Iterator[None]:
    """Progress documents in a cache of this test's own (Redis may be shared)."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"drill-feed-{uuid.uuid4().hex}",
        }
    }
    yield


def stored(status: str, region: str = "eu-west", **extra: Any) -> Drill:
    return Drill.objects.create(
        kind="region_outage",
        target=region,
        duration_s=30,
        params={
            "resolved": {"region": region, "endpoints": ["euw-1", "euw-2"]},
            "guardrails": {"strict_lists": [f"Z{i}/m" for i in range(200)]},
            "recovery_wait_s": 20,
        },
        status=status,
        created_by="tests",
        **extra,
    )


def drill_event(drill: Drill, text: str) -> None:
    Event.objects.create(
        at=timezone.now(), kind="drill", region="eu-west", message=text, data={"drill": drill.pk}
    )


@pytest.mark.django_db
def test_the_snapshot_carries_drills_under_way_and_the_last_ones(
    world: Any, make_user: Any
) -> None:
    done = stored(DrillStatus.FINISHED, finished_at=timezone.now())
    DrillReport.objects.create(
        drill=done, report={"verdict": "pass", "detected_after_s": 1.5, "timeline": {"x": 1}}
    )
    running = stored(DrillStatus.RUNNING, started_at=timezone.now())
    progress.publish({"id": running.pk, "phase": "fault", "taken": 2})

    drills = messages.snapshot_message(make_user("viewer"))["drills"]
    (active,) = drills["active"]
    assert active["id"] == running.pk and active["status"] == "running"
    assert active["region"] == "eu-west" and active["endpoints"] == ["euw-1", "euw-2"]
    assert active["progress"] == {"id": running.pk, "phase": "fault", "taken": 2}
    assert active["params"] == {"recovery_wait_s": 20}  # the guardrails' figures stay in the API
    assert [d["id"] for d in drills["recent"]] == [running.pk, done.pk]
    report = drills["recent"][1]["report"]
    assert report["verdict"] == "pass" and report["detected_after_s"] == 1.5
    assert "timeline" not in report  # read on demand from the API, not pushed to every page


@pytest.mark.django_db
def test_the_feed_sends_drills_while_one_runs_and_when_it_ends(world: Any) -> None:
    cursor = livefeed.start_cursor()
    assert livefeed.step(cursor) == []  # nothing under way, nothing new

    drill = stored(DrillStatus.RUNNING, started_at=timezone.now())
    drill_event(drill, "started")
    hotstate_tick()
    sent = [m for m in livefeed.step(cursor) if m["type"] == "drills.update"]
    assert [d["id"] for d in sent[0]["active"]] == [drill.pk]
    assert livefeed.step(cursor) == []  # unchanged: not sent again

    progress.publish({"id": drill.pk, "phase": "fault", "taken": 1})
    (update,) = livefeed.step(cursor)  # while it runs, its progress goes out without a tick
    assert update["active"][0]["progress"]["taken"] == 1

    Drill.objects.filter(pk=drill.pk).update(
        status=DrillStatus.FINISHED, finished_at=timezone.now()
    )
    DrillReport.objects.create(drill=drill, report={"verdict": "fail"})
    (update,) = livefeed.step(cursor)
    assert update["active"] == [] and update["recent"][0]["report"]["verdict"] == "fail"
    assert livefeed.step(cursor) == []  # none under way any more: the feed stops reading


def hotstate_tick() -> None:
    """Make the feed see a new tick (it reads events only then)."""
    from regions import hotstate

    store = hotstate.get()
    evaluation = {**store.evaluation(), "at": time.time()}
    store.set_evaluation(evaluation)


@pytest.mark.django_db(transaction=True)
def test_a_drill_reaches_a_connected_page(world: Any, make_user: Any, ws_headers: Any) -> None:
    headers = ws_headers(make_user("viewer"))

    async def scenario() -> None:
        comm = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
        assert (await comm.connect())[0]
        snapshot = await comm.receive_json_from(timeout=5)
        assert snapshot["drills"] == {"active": [], "recent": []}
        drill = await database_sync_to_async(stored)(DrillStatus.RUNNING)
        await database_sync_to_async(progress.publish)({"id": drill.pk, "phase": "baseline"})
        await database_sync_to_async(drill_event)(drill, "started")
        await database_sync_to_async(hotstate_tick)()
        deadline = time.monotonic() + 5
        while True:
            message = await comm.receive_json_from(timeout=max(0.1, deadline - time.monotonic()))
            if message["type"] == "drills.update":
                break
        assert message["active"][0]["id"] == drill.pk
        assert message["active"][0]["progress"]["phase"] == "baseline"
        await comm.disconnect()

    async_to_sync(scenario)()
