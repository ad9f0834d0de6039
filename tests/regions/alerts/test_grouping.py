"""Grouping, inhibition and silences: one alert is told once, and only when it says news."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.regions.alerts.conftest import at, run
from tests.regions.alerts.events import endpoint_event, region_event
from tests.regions.alerts.receiver import receiving

pytestmark = pytest.mark.django_db


def sent() -> list[tuple[str, str, str, int]]:
    from regions.models import Notification

    rows = Notification.objects.order_by("pk")
    return [(n.name, n.region, n.endpoint, n.repeats) for n in rows]


def test_the_same_alert_within_the_window_is_one_notification(channel: Any) -> None:
    with receiving([200]) as hook:
        channel("ops", url=hook.url)
        for k in range(3):  # an endpoint flapping: three ejections in a minute
            endpoint_event("eu-west", "euw-1", healthy=False, seconds=20 * k)
            endpoint_event("eu-west", "euw-1", healthy=True, seconds=20 * k + 10)
            run(20 * k + 11)
        assert sent() == [("endpoint_ejected", "eu-west", "euw-1", 2)]
        assert len(hook.bodies) == 1
        endpoint_event("eu-west", "euw-1", healthy=False, seconds=400)  # past the 300 s window
        run(401)
        assert [s[0] for s in sent()] == ["endpoint_ejected", "endpoint_ejected"]


def test_a_region_down_inhibits_its_endpoints_alerts(channel: Any) -> None:
    channel("ops", url="http://127.0.0.1:9/never-called")
    region_event("eu-west", "healthy", "down", seconds=0)
    endpoint_event("eu-west", "euw-1", healthy=False, seconds=0)
    endpoint_event("eu-west", "euw-2", healthy=False, seconds=1)
    endpoint_event("us-east", "use-1", healthy=False, seconds=1)  # another region: told
    from regions.alerts.notifier import route_new_events

    route_new_events(at(2))
    assert sent() == [
        ("region_down", "eu-west", "", 0),
        ("endpoint_ejected", "us-east", "use-1", 0),
    ]
    region_event("eu-west", "down", "recovering", seconds=10)
    endpoint_event("eu-west", "euw-2", healthy=False, seconds=20)  # the region is back: told
    route_new_events(at(21))
    assert sent()[-1] == ("endpoint_ejected", "eu-west", "euw-2", 0)


def test_a_silence_mutes_until_it_expires(channel: Any) -> None:
    from regions.alerts.notifier import route_new_events
    from regions.models import Silence

    channel("ops", url="http://127.0.0.1:9/never-called")
    Silence.objects.create(
        matchers={"region": "eu-west", "name": "region_degraded"},
        starts_at=at(0),
        expires_at=at(0) + dt.timedelta(minutes=10),
    )
    region_event("eu-west", "healthy", "degraded", seconds=60)
    region_event("us-east", "healthy", "degraded", seconds=60)  # not matched: told
    route_new_events(at(61))
    assert sent() == [("region_degraded", "us-east", "", 0)]
    region_event("eu-west", "healthy", "degraded", seconds=601)  # the silence has expired
    route_new_events(at(602))
    assert sent()[-1] == ("region_degraded", "eu-west", "", 0)


def test_channels_take_only_their_severity_and_events(channel: Any) -> None:
    from regions.alerts.notifier import route_new_events
    from regions.models import Notification

    channel("pages", url="http://127.0.0.1:9/a", min_severity="critical")
    channel("drills", url="http://127.0.0.1:9/b", min_severity="info", events=["drill_failed"])
    channel("all", url="http://127.0.0.1:9/c", min_severity="info")
    region_event("eu-west", "healthy", "degraded")
    region_event("us-east", "healthy", "down")
    route_new_events(at(1))
    got = sorted(Notification.objects.values_list("channel_name", "name"))
    assert got == [("all", "region_degraded"), ("all", "region_down"), ("pages", "region_down")]


def test_a_region_back_through_slow_start_is_told_as_recovered(channel: Any) -> None:
    from regions.alerts.notifier import route_new_events

    channel("all", url="http://127.0.0.1:9/c", min_severity="info")
    region_event("eu-west", "healthy", "down", seconds=0)
    region_event("eu-west", "down", "recovering", seconds=10)
    region_event("eu-west", "recovering", "healthy", seconds=40)
    route_new_events(at(41))
    assert [s[0] for s in sent()] == ["region_down", "failover", "region_recovered"]


def test_history_from_before_alerts_first_ran_is_not_news(channel: Any) -> None:
    from regions.alerts.notifier import route_new_events

    channel("ops", url="http://127.0.0.1:9/x")
    region_event("eu-west", "healthy", "down", seconds=0)  # a week before the first pass
    region_event("us-east", "healthy", "down", seconds=7 * 86400 - 60)  # a minute before
    route_new_events(at(7 * 86400))
    assert sent() == [("region_down", "us-east", "", 0)]
