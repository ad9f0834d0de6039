"""The alert worker pings an outside check after its passes, at most once per interval."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.alerts.conftest import run
from tests.regions.alerts.receiver import receiving

pytestmark = pytest.mark.django_db


def test_the_worker_pings_the_watchdog_once_per_interval(settings: Any) -> None:
    with receiving([200]) as check:
        settings.TRAFFICMGR = {
            **settings.TRAFFICMGR,
            "ALERTS_WATCHDOG_URL": check.url,
            "ALERTS_WATCHDOG_EVERY_S": 60,
        }
        assert run(0)["pinged"] == 1
        run(10)
        run(59)
        assert len(check.bodies) == 1
        assert check.bodies[0] == {"status": "ok", "pending": 0, "failed_last_hour": 0}
        run(61)
        assert len(check.bodies) == 2


def test_a_failed_ping_is_tried_again_on_the_next_pass(settings: Any) -> None:
    with receiving([503, 200]) as check:
        settings.TRAFFICMGR = {**settings.TRAFFICMGR, "ALERTS_WATCHDOG_URL": check.url}
        assert run(0)["pinged"] == 0
        assert run(2)["pinged"] == 1
        assert check.answered == [503, 200]


def test_no_watchdog_url_no_ping() -> None:
    assert run(0)["pinged"] == 0
