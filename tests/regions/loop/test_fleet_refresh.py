"""The control loop reloads a fleet view about to expire between ticks, not inside one."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0


def test_a_view_about_to_expire_is_reloaded_after_the_tick(feed: Any) -> None:
    from regions.fleet import snapshot
    from regions.loop.control import run_tick

    feed(T0)
    run_tick(T0, interval_s=1.0)
    young = snapshot.current()
    run_tick(T0 + 1, interval_s=1.0)
    assert snapshot.current() is young
    young.loaded_at = time.monotonic() - (snapshot.MAX_AGE_S - snapshot.REFRESH_AHEAD_S) - 0.1
    run_tick(T0 + 2, interval_s=1.0)
    reloaded = snapshot.current()
    assert reloaded is not young
    assert time.monotonic() - reloaded.loaded_at < 5.0
    assert reloaded.fleet == young.fleet


def test_a_failed_reload_does_not_fail_the_tick(feed: Any, monkeypatch: Any) -> None:
    from regions.fleet import snapshot
    from regions.loop.control import run_tick

    feed(T0)
    run_tick(T0, interval_s=1.0)
    old = snapshot.current()
    old.loaded_at = time.monotonic() - snapshot.MAX_AGE_S + 1.0

    def broken() -> Any:
        raise RuntimeError("database away")

    monkeypatch.setattr(snapshot, "load", broken)
    assert run_tick(T0 + 1, interval_s=1.0).ran
    assert snapshot.current() is old
