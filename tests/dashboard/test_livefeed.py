"""The live feed's step: a message per new tick, per configuration change, per new events."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from dashboard.livefeed import start_cursor, step
from regions.models import Event, Region


def test_nothing_is_sent_while_the_loop_does_not_tick(world: Any) -> None:
    cursor = start_cursor()
    assert step(cursor) == []
    assert step(cursor) == []


def test_a_new_tick_sends_the_live_state_and_the_events_written_since(
    world: Any, _in_process: Any
) -> None:
    cursor = start_cursor()
    event = Event.objects.create(at=timezone.now(), kind="drill", message="drill started")
    _in_process.set_evaluation(
        {
            "at": 1000.0,
            "endpoints": {},
            "regions": {"eu-west": {"state": "healthy", "since": 990.0, "paused": False}},
        }
    )
    sent = step(cursor)
    assert [m["type"] for m in sent] == ["live.update", "events.new"]
    assert sent[0]["at"] == 1000.0 and sent[0]["regions"]["eu-west"]["state"] == "healthy"
    assert [e["id"] for e in sent[1]["events"]] == [event.id]
    assert step(cursor) == []  # the same tick is not sent twice


def test_a_configuration_change_sends_the_configuration(world: Any) -> None:
    cursor = start_cursor()
    region = Region.objects.get(name="eu-west")
    region.weight = 0.5
    region.save()
    sent = step(cursor)
    assert [m["type"] for m in sent] == ["config.update"]
    weights = {r["name"]: r["weight"] for r in sent[0]["regions"]}
    assert weights["eu-west"] == 0.5
    assert step(cursor) == []
