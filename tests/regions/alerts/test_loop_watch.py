"""The control loop's own trouble reaches people: ticks that overrun, a loop that stalls."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.alerts.conftest import T0, run

pytestmark = pytest.mark.django_db


def told() -> list[tuple[str, str]]:
    from regions.models import Notification

    return list(Notification.objects.order_by("pk").values_list("name", "severity"))


def test_overrunning_ticks_are_told_once_per_change(feed: Any, channel: Any) -> None:
    from regions.loop.control import run_tick

    channel("ops", url="http://127.0.0.1:9/x", events=["tick_overrun"])
    feed(T0)
    assert run_tick(T0, interval_s=1.0).ran
    run(0.5)
    assert told() == []
    assert run_tick(T0 + 1, interval_s=1e-9).overran  # any tick is longer than 1 ns
    run(1.5)
    run(2.0)  # no new overrun: nothing more
    assert told() == [("tick_overrun", "warning")]


def test_a_stalled_loop_is_a_page(feed: Any, channel: Any) -> None:
    from regions.loop.control import run_tick

    channel("ops", url="http://127.0.0.1:9/x", events=["loop_stalled"])
    run(0)
    assert told() == []  # no tick yet: nothing to judge
    feed(T0)
    assert run_tick(T0, interval_s=1.0).ran
    run(20)
    assert told() == []  # within max(30 s, 10 intervals)
    run(31)
    assert told() == [("loop_stalled", "critical")]
