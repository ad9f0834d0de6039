"""Against a Redis that accepts and never answers, the hot state costs one timeout per spell.

The Redis store is pointed at a listener on 127.0.0.1 that accepts every connection and never
answers (``Blackhole``, as for the cache's partition test): the first read gives up after the
store's timeout; until ``RETRY_S`` has passed every other read is refused at once with
``HotStateAway`` (a ``ConnectionError``: the outage contract's 503), then one call probes.
The token cache's version check, run several times per authenticated request, keeps what it
holds without waiting. No Redis server is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from regions import conf, hotstate
from regions.access.auth import TokenCache
from regions.hotstate.redis_client import HotStateAway, ProbingBreaker
from regions.hotstate.redis_store import RedisHotState
from tests.blackhole import Blackhole

TIMEOUT_S = 0.3


@pytest.fixture
def partitioned() -> Iterator[tuple[RedisHotState, Blackhole]]:
    hole = Blackhole()
    store = RedisHotState(
        f"redis://127.0.0.1:{hole.port}/0", prefix="partition", timeout_s=TIMEOUT_S
    )
    yield store, hole
    store.redis.close()
    store.loop_redis.close()
    hole.close()


def took(call: Callable[[], object]) -> tuple[BaseException | None, float]:
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        return exc, time.monotonic() - start
    return None, time.monotonic() - start


def test_one_timeout_then_refused_at_once(partitioned: tuple[RedisHotState, Blackhole]) -> None:
    store, hole = partitioned
    error, first = took(store.token_version)
    assert isinstance(error, RedisTimeoutError), error
    assert hole.accepted, "the store never connected to the partitioned Redis"
    assert TIMEOUT_S * 0.8 < first < TIMEOUT_S * 3, first  # one wait, no retries of it
    for call in (store.config_version, store.table, lambda: store.set_machines({})):
        error, spent = took(call)
        assert isinstance(error, HotStateAway), error
        assert isinstance(error, RedisConnectionError)  # what the outage contract maps to 503
        assert spent < 0.05, spent
    # The loop's client (longer reads) shares the breaker: the tick fails at once too.
    error, spent = took(lambda: store.tick_info())
    assert isinstance(error, HotStateAway) and spent < 0.05


def test_after_the_spell_one_call_probes_and_the_others_are_still_refused() -> None:
    breaker = ProbingBreaker(retry_s=0.2, probe_s=0.5)
    breaker.failed()
    assert not breaker.admit()
    time.sleep(0.25)
    assert breaker.admit()  # the probe
    assert not breaker.admit()  # refused while the probe is out
    breaker.succeeded()
    assert breaker.admit() and breaker.admit()


def test_the_token_cache_keeps_its_version_without_waiting(
    partitioned: tuple[RedisHotState, Blackhole],
) -> None:
    store, _ = partitioned
    hotstate.use(store)
    try:
        cache = TokenCache(5.0, 10)
        start = time.monotonic()
        versions = [cache.version() for _ in range(20)]
        spent = time.monotonic() - start
    finally:
        hotstate.use(None)
    assert versions == [(-1, -1)] * 20
    assert spent < TIMEOUT_S * 3, f"20 version checks took {spent:.2f} s"


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf"])
def test_a_bad_timeout_is_refused_naming_the_variable(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAFFICMGR_HOTSTATE_TIMEOUT_S", raw)
    with pytest.raises(ValueError, match="TRAFFICMGR_HOTSTATE_TIMEOUT_S"):
        conf.hotstate_timeout_s()


def test_the_timeout_defaults_to_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAFFICMGR_HOTSTATE_TIMEOUT_S", raising=False)
    assert conf.hotstate_timeout_s() == 1.0
    monkeypatch.setenv("TRAFFICMGR_HOTSTATE_TIMEOUT_S", "0.5")
    assert conf.hotstate_timeout_s() == 0.5
