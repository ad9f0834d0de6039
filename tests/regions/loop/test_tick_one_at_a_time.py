"""Exactly one tick at a time: a second one is skipped, never stacked; overruns are reported."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

import pytest

from tests.regions.loop.conftest import wait_for

pytestmark = pytest.mark.django_db


def blocking_tick(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make ticks wait on ``release`` after setting ``entered``."""
    from regions.loop import control as controlloop

    entered, release = threading.Event(), threading.Event()

    def slow(store: Any, now: float, *fence: int) -> Any:
        entered.set()
        assert release.wait(10)
        return controlloop.TickResult(True, "v")

    monkeypatch.setattr(controlloop, "tick", slow)
    return entered, release


def race(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Start a tick in a thread, tick again while it runs; return both results."""
    from regions.loop.control import run_tick

    entered, release = blocking_tick(monkeypatch)
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(run_tick(1.0, interval_s=60)))
    thread.start()
    try:
        assert entered.wait(10)
        second = run_tick(2.0, interval_s=60)
    finally:
        release.set()
        thread.join(10)
    return results[0], second


def test_a_tick_while_another_runs_is_skipped(
    monkeypatch: pytest.MonkeyPatch, fresh_hot_state: Any
) -> None:
    first, second = race(monkeypatch)
    assert first.ran and not second.ran
    counters = fresh_hot_state.counters()
    assert counters["ticks|result=skipped"] == 1
    assert counters["ticks|result=ran"] == 1


def test_the_lock_is_free_again_after_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    from regions.loop.control import run_tick

    race(monkeypatch)
    _, release = blocking_tick(monkeypatch)
    release.set()
    assert run_tick(3.0, interval_s=60).ran


def test_an_overrunning_tick_is_measured_and_reported(
    monkeypatch: pytest.MonkeyPatch, fresh_hot_state: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from regions.loop import control as controlloop

    def slow(store: Any, now: float, *fence: int) -> Any:
        time.sleep(0.05)
        return controlloop.TickResult(True, "v")

    monkeypatch.setattr(controlloop, "tick", slow)
    with caplog.at_level(logging.WARNING, logger="regions.loop.control"):
        result = controlloop.run_tick(1.0, interval_s=0.01)
    assert result.overran and result.duration_s >= 0.05
    assert fresh_hot_state.counters()["ticks|result=overran"] == 1
    assert fresh_hot_state.tick_info()["last_duration_s"] >= 0.05
    assert "longer than the 0.010 s interval" in caplog.text


def test_the_embedded_ticker_runs_ticks_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from regions.loop import control as controlloop

    calls: list[float] = []

    def fake(store: Any, now: float, *fence: int) -> Any:
        calls.append(now)
        return controlloop.TickResult(True, "v")

    monkeypatch.setattr(controlloop, "tick", fake)
    ticker = controlloop.EmbeddedTicker(0.05).start()
    try:
        wait_for(lambda: len(calls) >= 3, timeout=10, step=0.02)
    finally:
        ticker.stop()
    assert not ticker.running
    count = len(calls)
    time.sleep(0.15)
    assert len(calls) == count, "no tick after stop()"


def test_the_embedded_ticker_drops_slots_a_slow_tick_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from regions.loop import control as controlloop

    starts: list[float] = []

    def slow(store: Any, now: float, *fence: int) -> Any:
        starts.append(time.monotonic())
        time.sleep(0.12)
        return controlloop.TickResult(True, "v")

    monkeypatch.setattr(controlloop, "tick", slow)
    ticker = controlloop.EmbeddedTicker(0.05).start()
    try:
        wait_for(lambda: len(starts) >= 3, timeout=10, step=0.02)
    finally:
        ticker.stop()
    assert ticker.missed >= 2
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.12, "never back to back"


@pytest.mark.integration
def test_with_redis_a_second_process_skips(
    monkeypatch: pytest.MonkeyPatch, redis_store: Any
) -> None:
    first, second = race(monkeypatch)
    assert first.ran and not second.ran
    assert redis_store.counters()["ticks|result=skipped"] == 1


@pytest.mark.integration
def test_with_redis_the_lock_is_shared_and_expires(
    redis_store: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regions.hotstate.redis_store import RedisHotState

    other = RedisHotState(redis_url, prefix=redis_store.prefix)  # another process, same keys
    # A dead worker renews nothing.
    monkeypatch.setattr(redis_store, "_keep_lease", lambda *args: None)
    with redis_store.tick_lock(0.3) as held:
        assert held
        with other.tick_lock(0.3) as also:
            assert not also
        time.sleep(0.4)  # a tick that outlives the lock's TTL (a dead worker)
        with other.tick_lock(5) as taken_over:
            assert taken_over
            # the first holder's release must not free the new holder's lock
    with redis_store.tick_lock(5) as again:
        assert again
