"""Accepted heartbeats: hot state, the reply, downsampled history, drills, retention."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.regions.loop.conftest import API, hb_doc

pytestmark = pytest.mark.django_db


def post(client: Any, doc: Any) -> Any:
    return client.generic(
        "POST", f"{API}/heartbeats/", json.dumps(doc).encode(), content_type="application/json"
    )


def test_the_agents_own_heartbeat_is_accepted(agent_api: Any, fresh_hot_state: Any) -> None:
    from agents.heartbeat import GpuReading, Heartbeat, ProbeReading, ServerReading, to_json

    now = time.time()
    hb = Heartbeat(
        endpoint="euw-1",
        seq=int(now * 1000),
        sent_at=now,
        interval_s=1.0,
        gpus=(GpuReading(0, "GPU-0", "H100", util_pct=None, mem_used_mb=1.0, mem_total_mb=2.0),),
        server=ServerReading("vllm", requests_running=3, kv_cache_usage=0.5),
        probe=ProbeReading(True, 12.0, 200),
    )
    response = post(agent_api("eu-west"), to_json(hb))
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": True, "interval_s": 1.0}
    stored = fresh_hot_state.heartbeats()["euw-1"]
    assert stored.seq == hb.seq
    assert stored.server.requests_running == 3
    assert stored.gpus[0].util_pct == 0.0  # unreadable: null → 0
    assert abs(stored.received_at - time.time()) < 5


def test_history_keeps_one_sample_per_endpoint_per_bucket(feed: Any) -> None:
    from regions.models import HeartbeatSample

    t0 = 1_800_000_000.0  # a bucket boundary (multiple of 10)
    feed(t0, ["euw-1"])
    feed(t0 + 3, ["euw-1"])
    feed(t0 + 9.9, ["euw-1", "euw-2"])
    feed(t0 + 10, ["euw-1"])
    rows = list(
        HeartbeatSample.objects.order_by("endpoint__name", "bucket").values_list(
            "endpoint__name", "bucket"
        )
    )
    assert rows == [("euw-1", 1_800_000_000), ("euw-1", 1_800_000_010), ("euw-2", 1_800_000_000)]


def test_retention_deletes_old_samples(feed: Any, settings: Any) -> None:
    from regions.loop.retention import purge_history_now
    from regions.models import HeartbeatSample

    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "HEARTBEAT_RETENTION_DAYS": 2}
    now = time.time()
    feed(now - 3 * 86400 + 3600, ["euw-1"])  # older than 2 days once "now" is 3 days later
    feed(now, ["euw-1"])
    HeartbeatSample.objects.update()  # no-op; the rows exist
    assert HeartbeatSample.objects.count() == 2
    gone = purge_history_now(now + 3600)
    assert gone["heartbeat_samples"] == 1
    assert HeartbeatSample.objects.count() == 1


def test_a_pending_drill_rides_on_the_reply_once(agent_api: Any, fresh_hot_state: Any) -> None:
    now = time.time()
    fresh_hot_state.set_drill("euw-1", {"kind": "silence", "duration_s": 30, "id": "d1"}, 60)
    first = post(agent_api("eu-west"), hb_doc("euw-1", 1, now))
    second = post(agent_api("eu-west"), hb_doc("euw-1", 2, now))
    assert first.json()["drill"] == {"kind": "silence", "duration_s": 30, "id": "d1"}
    assert "drill" not in second.json()


def test_running_error_counts_become_errors_since_the_last_heartbeat(
    feed: Any, fresh_hot_state: Any
) -> None:
    from regions.loop.heartbeat_doc import error_deltas

    deltas, totals = error_deltas(
        [{"index": 0, "xid_errors": 5, "ecc_errors": 2, "lost": False}], {}
    )
    assert deltas == [(0, 0)]  # first sight: a baseline
    deltas, totals = error_deltas(
        [{"index": 0, "xid_errors": 7, "ecc_errors": 2, "lost": False}], totals
    )
    assert deltas == [(2, 0)]
    deltas, totals = error_deltas(
        [{"index": 0, "xid_errors": 1, "ecc_errors": None, "lost": True}], totals
    )
    assert deltas == [(1 + 1, 0)]  # counter reset (agent restart) plus the lost GPU
    assert totals == {"0": [1, 2]}


def test_accepts_and_rejects_are_counted(agent_api: Any, fresh_hot_state: Any) -> None:
    now = time.time()
    post(agent_api("eu-west"), hb_doc("euw-1", 5, now))
    post(agent_api("eu-west"), hb_doc("euw-1", 5, now))
    post(agent_api("eu-west"), {"endpoint": "euw-1"})
    counters = fresh_hot_state.counters()
    assert counters["heartbeats|reason=ok\x1fresult=accepted"] == 1
    assert counters["heartbeats|reason=stale_seq\x1fresult=rejected"] == 1
    assert counters["heartbeats|reason=invalid\x1fresult=rejected"] == 1


def test_the_hot_paths_have_their_own_rate_limit(agent_api: Any, settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "loop": "3/min",
        },
    }
    client = agent_api("eu-west")
    now = time.time()
    codes = [post(client, hb_doc("euw-1", i, now)).status_code for i in range(1, 5)]
    assert codes == [200, 200, 200, 429]


@pytest.mark.parametrize("source", ["gpm_sm", "nvml_util", None])
def test_the_util_source_is_optional_and_one_of_two(
    agent_api: Any, fresh_hot_state: Any, source: str | None
) -> None:
    doc = hb_doc("euw-1", int(time.time() * 1000), time.time())
    if source is not None:
        doc["gpus"][0]["util_source"] = source
    response = post(agent_api("eu-west"), doc)
    assert response.status_code == 200, response.content


def test_an_unknown_util_source_is_refused_by_name(agent_api: Any, fresh_hot_state: Any) -> None:
    doc = hb_doc("euw-1", int(time.time() * 1000), time.time())
    doc["gpus"][0]["util_source"] = "other"
    response = post(agent_api("eu-west"), doc)
    assert response.status_code == 400
    assert "gpus[0].util_source" in response.json()["fields"]
    assert "euw-1" not in fresh_hot_state.heartbeats()
