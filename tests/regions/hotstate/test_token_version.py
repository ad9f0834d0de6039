"""The token version is shared through the hot state, so a revoke reaches every process."""

from __future__ import annotations

import pytest


def test_the_in_process_store_counts_token_writes() -> None:
    from regions.hotstate import MemoryHotState

    store = MemoryHotState()
    assert store.token_version() == 0
    store.bump_token_version()
    assert store.token_version() == 1
    store.reset()
    assert store.token_version() == 0


@pytest.mark.integration
def test_a_revoke_reaches_another_process_through_redis(redis_url: str) -> None:
    import time
    import uuid

    from regions.hotstate.redis_store import VERSION_CHECK_S, RedisHotState

    prefix = f"trafficmgr-test-{uuid.uuid4().hex[:10]}"
    here, there = RedisHotState(redis_url, prefix), RedisHotState(redis_url, prefix)
    try:
        seen = there.token_version()
        here.bump_token_version()
        assert here.token_version() == seen + 1  # the bumping process sees it at once
        time.sleep(VERSION_CHECK_S + 0.05)
        assert there.token_version() == seen + 1
    finally:
        here.reset()
