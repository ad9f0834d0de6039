"""History rows written in the background: batched, bounded, one bad row spoils nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.regions.loop.conftest import hb_doc

pytestmark = pytest.mark.django_db(transaction=True)


def rows_for(endpoints: dict[str, int], bucket: int) -> list[Any]:
    from regions.loop import heartbeat_history, ingest
    from regions.loop.heartbeat_doc import to_heartbeat

    now = time.time()
    out = []
    for name, pk in endpoints.items():
        doc = ingest.parse_heartbeat(json.dumps(hb_doc(name, 1, now)).encode())
        hb, _ = to_heartbeat(doc, now, {})
        out.append(heartbeat_history.history_row(pk, bucket, hb))
    return out


def test_a_row_of_a_deleted_endpoint_does_not_spoil_the_batch(loop_world: Any) -> None:
    from regions.loop import heartbeat_history
    from regions.models import Endpoint, HeartbeatSample

    pks = dict(Endpoint.objects.filter(name__in=["euw-1", "euw-2"]).values_list("name", "pk"))
    rows = rows_for({**pks, "gone": 10**9}, 1_800_000_000)
    heartbeat_history.store_samples(rows)
    stored = HeartbeatSample.objects.values_list("endpoint__name", flat=True)
    assert sorted(stored) == ["euw-1", "euw-2"]
    # The same bucket again: the second writer loses quietly.
    heartbeat_history.store_samples(rows[:1])
    assert HeartbeatSample.objects.count() == 2


def test_the_writer_batches_in_the_background_and_stays_bounded(loop_world: Any) -> None:
    from regions.loop import heartbeat_history
    from regions.models import Endpoint, HeartbeatSample

    pks = dict(Endpoint.objects.values_list("name", "pk"))
    writer = heartbeat_history.HistoryWriter(flush_s=0.5, max_pending=3)
    for row in rows_for(pks, 1_800_000_010):  # five endpoints, room for three
        writer.submit(row)
    assert writer.dropped == 2
    deadline = time.monotonic() + 5
    while HeartbeatSample.objects.count() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    writer.stop()
    assert HeartbeatSample.objects.count() == 3
