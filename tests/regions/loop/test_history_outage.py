"""Heartbeat history written while the database is away is kept and written once it is back.

Before: the history writer dropped a batch it could not store (20-26 of 56 rows lost in a
20 s outage), and the request path's own write failed the heartbeat.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import OperationalError

from regions.loop import heartbeat_history
from regions.models import Endpoint, HeartbeatSample

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0


def rows(loop_world: Any, count: int) -> list[HeartbeatSample]:
    endpoint = Endpoint.objects.get(name="euw-1")
    return [
        HeartbeatSample(
            endpoint_id=endpoint.pk,
            bucket=int(T0) + 10 * k,
            received_at=dt.datetime.fromtimestamp(T0 + 10 * k, dt.UTC),
            seq=k,
        )
        for k in range(count)
    ]


def test_rows_wait_for_the_database_and_are_written_once_it_is_back(
    loop_world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = heartbeat_history.HistoryWriter(retry_s=0.0)
    monkeypatch.setattr(writer, "_start", lambda: None)  # flushed by hand here
    real = heartbeat_history.store_samples

    def away(batch: list[HeartbeatSample]) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(heartbeat_history, "store_samples", away)
    for row in rows(loop_world, 6):
        writer.submit(row)
        writer._flush_quietly()  # the database is away: nothing may be lost
    assert writer.pending() == 6 and writer.dropped == 0
    monkeypatch.setattr(heartbeat_history, "store_samples", real)
    assert writer.flush() == 6
    assert HeartbeatSample.objects.count() == 6


def test_the_backlog_stays_bounded(loop_world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = heartbeat_history.HistoryWriter(retry_s=0.0, max_pending=4)
    monkeypatch.setattr(writer, "_start", lambda: None)
    monkeypatch.setattr(
        heartbeat_history,
        "store_samples",
        lambda batch: (_ for _ in ()).throw(OperationalError("down")),
    )
    for row in rows(loop_world, 6):
        writer.submit(row)
    writer._flush_quietly()
    assert writer.pending() == 4 and writer.dropped == 2


def test_a_heartbeat_is_accepted_while_its_history_row_cannot_be_stored(
    feed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heartbeat_history.late_history, "_start", lambda: None)

    def away(batch: list[HeartbeatSample]) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(heartbeat_history, "store_samples", away)
    feed(T0)  # asserts every heartbeat was accepted
    assert heartbeat_history.late_history.pending() == 5
    monkeypatch.undo()
    heartbeat_history.late_history.flush()
    assert HeartbeatSample.objects.count() == 5
