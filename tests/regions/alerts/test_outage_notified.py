"""A region outage the loop detects is notified once, and survives a receiver's bad start.

The loop's real tick takes eu-west down (its heartbeats stop); the next pass of the alert
worker turns the failover event into one notification for the webhook channel; the receiver
answers 500 twice, and the third attempt, after the backoff, delivers it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.alerts.conftest import T0, run
from tests.regions.alerts.receiver import receiving
from tests.regions.loop.conftest import ENDPOINTS

pytestmark = pytest.mark.django_db
EU_WEST = ("euw-1", "euw-2")
OTHERS = tuple(e for e in ENDPOINTS if e not in EU_WEST)


def take_eu_west_down(feed: Any) -> None:
    from regions.loop.control import run_tick

    feed(T0)
    assert run_tick(T0, interval_s=1.0).ran
    for k in range(1, 5):  # silent past the miss threshold (3 x 1 s)
        feed(T0 + k, OTHERS)
        assert run_tick(T0 + k, interval_s=1.0).ran


def test_an_outage_is_delivered_once_on_the_third_attempt(feed: Any, channel: Any) -> None:
    from regions.models import Event, Notification

    with receiving([500, 500, 200]) as hook:
        channel("ops", url=hook.url, events=["region_down"])
        take_eu_west_down(feed)
        assert Event.objects.filter(region="eu-west", kind="failover").count() == 1
        run(4.0)  # the pass after the tick that detected it: notified, first attempt
        run(4.5)  # backoff 1 s: not due yet
        run(5.0)  # second attempt
        run(6.0)  # not due: the next waits 2 s
        run(7.0)  # third attempt
        run(60.0)  # nothing left to do
        (sent,) = Notification.objects.all()
        assert (sent.name, sent.channel_name, sent.status, sent.attempts) == (
            "region_down",
            "ops",
            "delivered",
            3,
        )
        assert hook.answered == [500, 500, 200]
        body = hook.bodies[-1]
        assert body["event"] == "region_down" and body["severity"] == "critical"
        assert body["region"] == "eu-west" and "healthy → down" in body["summary"]
        assert body["at"].startswith("2027-01-15")
        assert hook.bodies[0] == body  # every attempt sends the same alert


def test_a_receiver_failing_for_ever_gets_bounded_attempts_then_failed(
    feed: Any, channel: Any
) -> None:
    from regions.models import Notification

    with receiving([500]) as hook, receiving([200]) as spare:
        backup = channel("backup", url=spare.url, events=["drill_failed"])  # only as fallback
        channel("ops", url=hook.url, fallback=backup, events=["region_down"])
        take_eu_west_down(feed)
        for second in range(4, 200):
            run(float(second))
        first = Notification.objects.get(channel_name="ops")
        assert (first.status, first.attempts) == ("failed", 4)  # ALERTS_MAX_ATTEMPTS
        assert "HTTP 500" in first.last_error
        assert len(hook.answered) == 4
        handed = Notification.objects.get(channel_name="backup")
        assert (handed.status, handed.attempts, handed.origin_id) == ("delivered", 1, first.pk)
        assert spare.bodies[0]["event"] == "region_down"
