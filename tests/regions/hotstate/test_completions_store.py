"""Both hot states keep the reported completions as one bounded, ordered stream per region."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from trafficmgr.contracts import Completion, decode_completions, stream_position


def done(i: int, endpoint: str = "euw-1") -> Completion:
    return Completion(endpoint, "llama-3-8b", 100 + i, i, 0.5 + i / 1000, (i, 2**64 - 1, -(2**63)))


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        from regions.hotstate import MemoryHotState

        yield MemoryHotState()
    else:
        yield request.getfixturevalue("redis_store")


def test_completions_round_trip_by_region_in_order(store: Any) -> None:
    store.add_completions({"eu-west": [done(1), done(2)], "us-east": [done(3, "use-1")]})
    store.add_completions({"eu-west": [done(4)]})
    west = store.completions("eu-west", None, 100)
    assert [c for _, c in west] == [done(1), done(2), done(4)]
    positions = [stream_position(i) for i, _ in west]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert [c for _, c in store.completions("us-east", None, 100)] == [done(3, "use-1")]
    assert store.completions("ap-south", None, 100) == []
    assert store.completions("ap-south", "0-0", 100) == []


def test_reading_after_an_id_gives_what_is_newer_bounded(store: Any) -> None:
    store.add_completions({"eu-west": [done(i) for i in range(10)]})
    entries = store.completions("eu-west", None, 100)
    assert [c for _, c in store.completions("eu-west", entries[3][0], 4)] == [
        done(i) for i in range(4, 8)
    ]
    assert store.completions("eu-west", entries[-1][0], 4) == []
    assert [c for _, c in store.completions("eu-west", "0-0", 3)] == [done(0), done(1), done(2)]
    assert [c for _, c in store.completions("eu-west", None, 3)] == [done(7), done(8), done(9)]
    assert store.completions("eu-west", None, 0) == []


def test_each_stream_is_bounded(store: Any, monkeypatch: Any) -> None:
    from regions.hotstate import memory, redis_store

    monkeypatch.setattr(memory, "COMPLETIONS_MAXLEN", 100)
    monkeypatch.setattr(redis_store, "COMPLETIONS_MAXLEN", 100)
    for start in range(0, 2000, 500):
        store.add_completions({"eu-west": [done(i) for i in range(start, start + 500)]})
    kept = store.completions("eu-west", None, 10_000)
    assert 100 <= len(kept) < 500  # Redis trims whole nodes (MAXLEN ~): about the bound
    assert kept[-1][1] == done(1999)


def test_reset_empties_the_streams_and_ids_keep_ascending(store: Any) -> None:
    store.add_completions({"eu-west": [done(1)]})
    ((first, _),) = store.completions("eu-west", None, 10)
    store.reset()
    assert store.completions("eu-west", None, 10) == []
    time.sleep(0.002)  # Redis numbers a new stream's entries from the clock's milliseconds
    store.add_completions({"eu-west": [done(2)]})
    ((second, c),) = store.completions("eu-west", first, 10)
    assert c == done(2) and stream_position(second) > stream_position(first)


def test_an_entry_that_does_not_decode_is_skipped() -> None:
    good = '["euw-1","m",1,2,0.5,[3]]'
    raw = [("1-0", good), ("2-0", "not json"), ("3-0", '["euw-1","m","x",2,0.5]'), ("4-0", good)]
    assert [i for i, _ in decode_completions(raw)] == ["1-0", "4-0"]


@pytest.mark.integration
def test_redis_skips_a_damaged_entry(redis_store: Any) -> None:
    redis_store.add_completions({"eu-west": [done(1)]})
    redis_store.redis.xadd(redis_store.key("completions:eu-west"), {"junk": "1"})
    redis_store.add_completions({"eu-west": [done(2)]})
    assert [c for _, c in redis_store.completions("eu-west", None, 10)] == [done(1), done(2)]
