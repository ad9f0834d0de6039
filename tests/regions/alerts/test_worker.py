"""The alert worker runs apart from the tick: on beat under a pinned name, or in a thread;
a tick runs while a receiver hangs in the middle of an attempt."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.regions.alerts.events import region_event
from tests.regions.alerts.receiver import receiving


def test_beat_runs_the_alert_worker_under_its_pinned_name() -> None:
    from regions.tasks import app

    entry = app.conf.beat_schedule["trafficmgr-alerts"]
    assert entry["task"] == "regions.alerts.run"
    assert "regions.alerts.run" in app.tasks


@pytest.mark.django_db(transaction=True)
def test_a_tick_runs_while_a_receiver_hangs(channel: Any, loop_world: Any, settings: Any) -> None:
    from regions.alerts.tasks import AlertWorker
    from regions.loop.control import run_tick
    from regions.models import Notification

    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "ALERTS_TIMEOUT_S": 60}
    with receiving([200], hang_s=60.0) as hook:
        channel("ops", url=hook.url)
        region_event("eu-west", "healthy", "down")
        worker = AlertWorker(every_s=0.1).start()
        try:
            deadline = time.monotonic() + 20
            while not hook.bodies and time.monotonic() < deadline:
                time.sleep(0.05)
            assert hook.bodies, "the worker never reached the receiver"
            assert run_tick(time.time(), interval_s=1.0).ran  # the receiver is still hanging
            assert Notification.objects.get().attempts == 0  # ... mid-attempt
            hook.release.set()
        finally:
            worker.stop()
        assert Notification.objects.get().status == "delivered"
