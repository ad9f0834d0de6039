"""A permanent error (4xx but 429) fails at once and disables the channel, saying why;
a hanging receiver costs one timeout per attempt; a test send that gets through re-enables."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.alerts.conftest import run
from tests.regions.alerts.events import region_event
from tests.regions.alerts.receiver import receiving

pytestmark = pytest.mark.django_db


def test_a_404_disables_the_channel_after_one_attempt(channel: Any, admin_client: Any) -> None:
    from regions.models import AlertChannel, Notification

    with receiving([404, 200]) as hook:
        channel("ops", url=hook.url)
        region_event("eu-west", "healthy", "down")
        for second in range(1, 30):
            run(second)
        n = Notification.objects.get()
        assert (n.status, n.attempts, n.last_error) == ("failed", 1, "HTTP 404 from the receiver")
        ops = AlertChannel.objects.get()
        assert not ops.enabled and ops.disabled_reason.startswith("HTTP 404 from the receiver")
        shown = admin_client.get("/api/v1/alert-channels/ops/").json()
        assert shown["enabled"] is False and "HTTP 404" in shown["disabled_reason"]
        region_event("us-east", "healthy", "down", seconds=40)  # a disabled channel gets nothing
        run(41)
        assert Notification.objects.count() == 1 and len(hook.answered) == 1
        admin_client.post("/api/v1/alert-channels/ops/test")  # fixed: a test send re-enables
        from regions.alerts.service import run_once

        run_once()
        ops.refresh_from_db()
        assert ops.enabled and ops.disabled_reason == "" and hook.answered == [404, 200]


def test_429_is_retried_not_disabled(channel: Any) -> None:
    from regions.models import AlertChannel, Notification

    with receiving([429, 200]) as hook:
        channel("ops", url=hook.url)
        region_event("eu-west", "healthy", "down")
        for second in range(1, 10):
            run(second)
        assert Notification.objects.get().status == "delivered"
        assert AlertChannel.objects.get().enabled and hook.answered == [429, 200]


def test_a_hanging_receiver_costs_one_timeout_per_attempt(channel: Any, settings: Any) -> None:
    from regions.models import Notification

    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "ALERTS_TIMEOUT_S": 0.5}
    with receiving([200], hang_s=5.0) as hook:
        channel("ops", url=hook.url)
        region_event("eu-west", "healthy", "down")
        run(1)
        n = Notification.objects.get()
        assert (n.status, n.attempts) == ("pending", 1)
        assert n.last_error == "no answer within 0.5 s"
        assert len(hook.bodies) == 1
