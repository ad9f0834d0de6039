"""The tick lock: a lease of about two tick intervals, renewed while the tick runs, fenced.

Before: the lock lived max(30 s, 10 intervals), so a worker killed mid-tick froze the loop
for 30 s, and nothing stopped a stalled worker from publishing over a newer tick.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from regions.hotstate import Lease, TickState
from regions.loop import control

pytestmark = pytest.mark.integration


def test_a_dead_tick_blocks_the_loop_for_at_most_two_intervals() -> None:
    assert control.lock_ttl(1.0) <= 2.0
    assert control.lock_ttl(0.5) <= 1.0


def test_the_lease_is_renewed_while_the_tick_runs(redis_store: Any) -> None:
    key = redis_store.key("lock:tick")
    with redis_store.tick_lock(0.3) as lease:
        assert lease
        time.sleep(0.6)  # twice the TTL: only renewal keeps it
        assert redis_store.redis.get(key), "the lease expired while its tick ran"
        assert not lease.lost
    assert redis_store.redis.get(key) is None


def test_a_stalled_tick_cannot_publish_over_a_newer_one(
    redis_store: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regions.hotstate.redis_store import RedisHotState

    newer = RedisHotState(redis_url, prefix=redis_store.prefix)  # another worker
    monkeypatch.setattr(redis_store, "_keep_lease", lambda *args: None)  # stalled: no renewal
    with redis_store.tick_lock(0.2) as stalled:
        time.sleep(0.3)
        with newer.tick_lock(5) as fresh:
            assert fresh.fence > stalled.fence
            assert newer.save_tick(TickState(fresh.fence, {}, {"at": 2.0}))
        assert not redis_store.save_tick(TickState(stalled.fence, {}, {"at": 1.0}))
    assert newer.evaluation() == {"at": 2.0}


def test_fences_never_go_back_after_redis_lost_its_counter(redis_store: Any) -> None:
    with redis_store.tick_lock(5) as first:
        assert isinstance(first, Lease) and first.fence >= 1
    redis_store.redis.delete(redis_store.key("tick:fence"))  # a restart without data
    with redis_store.tick_lock(5, fence_floor=first.fence + 1) as second:
        assert second.fence > first.fence


def test_the_lock_names_the_process_holding_it(redis_store: Any) -> None:
    import os

    with redis_store.tick_lock(5):
        holder = redis_store.redis.get(redis_store.key("lock:tick"))
    assert holder.split(":")[1] == str(os.getpid())
