"""The two hot-state stores keep one contract (Redis ones need ``REDIS_URL``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from trafficmgr.routing.types import GpuSample, Heartbeat, ProbeSample, ServerSample

T0 = 1_800_000_000.0


def beat(seq: int, sent_at: float = T0, endpoint: str = "euw-1") -> Heartbeat:
    return Heartbeat(
        endpoint,
        seq,
        sent_at,
        sent_at + 0.01,
        (GpuSample(0, "GPU-0", "H100", 55.5, 1.0, 2.0, 61.0, 300.0, ("hw_slowdown",), 0, 1),),
        ServerSample("vllm", 3, 1, 0.25, 900.0, 100.0, 300.0, ("llama-3-8b",)),
        ProbeSample(True, 12.5),
    )


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        from regions.hotstate import MemoryHotState

        yield MemoryHotState()
    else:
        yield request.getfixturevalue("redis_store")


def test_heartbeats_round_trip(store: Any) -> None:
    hb = beat(5)
    assert store.put_heartbeat(hb, 100, {"0": [1, 0]}).accepted
    assert store.heartbeats() == {"euw-1": hb}
    assert store.heartbeats(["euw-1", "nope"]) == {"euw-1": hb}
    assert store.error_totals("euw-1") == {"0": [1, 0]}


def test_compare_and_set_on_seq(store: Any) -> None:
    assert store.put_heartbeat(beat(5), 100).accepted
    assert not store.put_heartbeat(beat(5), 100).accepted  # replay
    assert not store.put_heartbeat(beat(4, T0 + 0.5), 100).accepted  # out of order
    assert store.put_heartbeat(beat(6, T0 + 1), 100).accepted
    assert store.put_heartbeat(beat(1, T0 + 10), 110).accepted  # agent restarted
    assert store.heartbeats()["euw-1"].seq == 1


def test_one_new_bucket_per_endpoint(store: Any) -> None:
    assert store.put_heartbeat(beat(1), 100).new_bucket
    assert not store.put_heartbeat(beat(2), 100).new_bucket
    assert store.put_heartbeat(beat(3), 110).new_bucket
    assert store.put_heartbeat(beat(1, endpoint="euw-2"), 110).new_bucket


def test_drills_are_delivered_once(store: Any) -> None:
    store.set_drill("euw-1", {"kind": "silence", "duration_s": 5}, 30)
    assert store.pop_drill("euw-1") == {"kind": "silence", "duration_s": 5}
    assert store.pop_drill("euw-1") is None


def test_counters_and_config_version(store: Any) -> None:
    store.incr([("a", 1), ("b|x=1", 2.5)])
    store.incr([("a", 1)])
    assert store.counters() == {"a": 2.0, "b|x=1": 2.5}
    version = store.config_version()
    store.bump_config_version()
    assert store.config_version() == version + 1


def test_machines_round_trip(store: Any) -> None:
    from trafficmgr.routing.failover import RegionMachine
    from trafficmgr.routing.types import RegionState

    machines = {"eu-west": RegionMachine(RegionState.RECOVERING, T0, 2, 0, True, T0 + 1)}
    store.set_machines(machines)
    assert store.machines() == machines


def test_published_table_round_trips(store: Any, feed_table: Any) -> None:
    store.publish_table(feed_table)
    assert store.table_version() == feed_table.version
    assert store.table() == feed_table


def test_followers_get_the_current_table_then_each_published_one(
    store: Any, feed_table: Any
) -> None:
    """What the embedded demo's DNS server follows, with Redis or without."""
    from dataclasses import replace

    store.publish_table(feed_table)
    seen: list[str] = []
    stop = store.follow_tables(lambda table: seen.append(table.version))
    try:
        wait_until(lambda: seen == [feed_table.version])
        store.publish_table(replace(feed_table, version="next"))
        wait_until(lambda: seen == [feed_table.version, "next"])
    finally:
        stop()
    store.publish_table(replace(feed_table, version="after"))
    time.sleep(0.3)
    assert seen == [feed_table.version, "next"]


def wait_until(done: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert done()


@pytest.fixture
def feed_table() -> Any:
    from tests.worlds import GDPR
    from trafficmgr.fleetfile import load_fleet_text
    from trafficmgr.routing.table import static_table

    return static_table(load_fleet_text(GDPR), T0)


@pytest.mark.integration
def test_redis_publish_reaches_subscribers_and_the_contract_key(
    redis_store: Any, feed_table: Any
) -> None:
    pubsub = redis_store.redis.pubsub()
    pubsub.subscribe(redis_store.key("table:updates"))
    try:
        pubsub.get_message(timeout=2)  # the subscribe confirmation
        redis_store.publish_table(feed_table)
        message = None
        deadline = time.monotonic() + 5
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
    finally:
        pubsub.close()
    assert message is not None
    assert json.loads(message["data"])["version"] == feed_table.version
    assert json.loads(redis_store.redis.get(redis_store.key("table")))["version"] == (
        feed_table.version
    )


def test_an_accepted_heartbeat_takes_the_pending_drill(store: Any) -> None:
    store.set_drill("euw-1", {"kind": "latency", "duration_s": 5}, 30)
    store.put_heartbeat(beat(1), 100)
    assert not store.put_heartbeat(beat(1), 100).accepted
    assert store.pop_drill("euw-1") is None  # the accepted one took it...
    store.set_drill("euw-1", {"kind": "silence", "duration_s": 5}, 30)
    assert store.put_heartbeat(beat(2), 100).drill == {"kind": "silence", "duration_s": 5}


@pytest.mark.integration
def test_redis_counters_summed_in_process_reach_other_processes(
    redis_store: Any, redis_url: str
) -> None:
    from regions.hotstate.redis_store import RedisHotState

    other = RedisHotState(redis_url, prefix=redis_store.prefix)
    redis_store.incr([("x", 1)])
    redis_store.incr([("x", 2)])
    redis_store.flush()
    assert other.counters() == {"x": 3.0}


def test_evaluation_round_trips(store: Any) -> None:
    assert store.evaluation() == {}
    doc = {"at": T0, "endpoints": {"euw-1": {"healthy": True, "score": 0.5}}, "regions": {}}
    store.set_evaluation(doc)
    assert store.evaluation() == doc
    store.set_evaluation({**doc, "at": T0 + 1})
    assert store.evaluation()["at"] == T0 + 1


def test_stored_heartbeat_json_round_trips_with_its_shape() -> None:
    from trafficmgr.contracts import decode_heartbeat, encode_heartbeat

    hb = beat(5)
    raw = encode_heartbeat(hb)
    assert decode_heartbeat(raw) == hb
    assert decode_heartbeat(raw.decode()) == hb
    doc = json.loads(raw)
    assert doc["received_at"] == hb.received_at and doc["probe"] == [True, 12.5]
    assert doc["gpus"][0]["util_pct"] == 55.5 and doc["gpus"][0]["throttle_reasons"] == [
        "hw_slowdown"
    ]
    assert doc["server"]["models_loaded"] == ["llama-3-8b"]
    bare = Heartbeat("euw-2", 1, T0, T0, ())
    assert decode_heartbeat(encode_heartbeat(bare)) == bare
    assert set(json.loads(encode_heartbeat(bare))) == {
        "endpoint",
        "seq",
        "sent_at",
        "received_at",
        "gpus",
    }


def test_heartbeats_stored_with_gpus_as_rows_still_decode() -> None:
    from trafficmgr.contracts import decode_heartbeat

    hb = beat(5)
    rows = {
        "endpoint": "euw-1",
        "seq": 5,
        "sent_at": T0,
        "received_at": T0 + 0.01,
        "gpus": [[0, "GPU-0", "H100", 55.5, 1.0, 2.0, 61.0, 300.0, ["hw_slowdown"], 0, 1]],
        "server": ["vllm", 3, 1, 0.25, 900.0, 100.0, 300.0, ["llama-3-8b"]],
        "probe": [True, 12.5],
    }
    assert decode_heartbeat(json.dumps(rows)) == hb


@pytest.mark.integration
def test_redis_decodes_a_stored_heartbeat_once(redis_store: Any) -> None:
    redis_store.put_heartbeat(beat(1), 100)
    redis_store.put_heartbeat(beat(1, endpoint="euw-2"), 100)
    first = redis_store.heartbeats()
    again = redis_store.heartbeats()
    assert again == first and all(again[n] is first[n] for n in first)
    assert redis_store.heartbeats(["euw-1"])["euw-1"] is first["euw-1"]
    redis_store.put_heartbeat(beat(2, T0 + 1), 100)
    moved = redis_store.heartbeats()
    assert moved["euw-1"].seq == 2 and moved["euw-2"] is first["euw-2"]
    redis_store.redis.hdel(redis_store.key("heartbeats"), "euw-2")
    assert set(redis_store.heartbeats()) == {"euw-1"}


@pytest.mark.integration
def test_redis_evaluation_is_parsed_once_per_tick(redis_store: Any, redis_url: str) -> None:
    from regions.hotstate.redis_store import RedisHotState

    other = RedisHotState(redis_url, prefix=redis_store.prefix)
    redis_store.set_evaluation({"at": T0, "endpoints": {}, "regions": {}})
    seen = other.evaluation()
    assert seen == {"at": T0, "endpoints": {}, "regions": {}}
    assert other.evaluation() is seen
    redis_store.set_evaluation({"at": T0 + 1, "endpoints": {}, "regions": {}})
    assert other.evaluation()["at"] == T0 + 1
