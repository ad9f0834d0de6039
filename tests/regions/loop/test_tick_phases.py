"""A tick tells how long each of its phases took."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0


def test_a_tick_reports_its_phases_in_order(feed: Any) -> None:
    from regions.loop.control import run_tick

    feed(T0)
    first = run_tick(T0, interval_s=1.0)
    names = [name for name, _ in first.phases]
    assert names == [
        "fleet",
        "heartbeats",
        "evaluate",
        "compile",
        "diff",
        "write",
        "dashboard",
    ]
    assert all(seconds >= 0 for _, seconds in first.phases)
    assert sum(seconds for _, seconds in first.phases) <= first.duration_s
    feed(T0 + 1)
    unchanged = run_tick(T0 + 1, interval_s=1.0)
    assert not unchanged.changed
    assert [name for name, _ in unchanged.phases] == names[:6]  # nothing to publish
