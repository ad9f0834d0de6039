"""What each kind of channel receives: Slack's ``text``, PagerDuty Events v2, an email."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.alerts.conftest import run
from tests.regions.alerts.events import region_event
from tests.regions.alerts.receiver import receiving

pytestmark = pytest.mark.django_db


def test_slack_gets_a_text(channel: Any) -> None:
    with receiving([200]) as hook:
        channel("chat", kind="slack", url=hook.url)
        region_event("eu-west", "healthy", "down")
        run(1)
        (body,) = hook.bodies
        assert set(body) == {"text"}
        assert body["text"].startswith("[CRITICAL] region_down eu-west: region eu-west: healthy")


def test_pagerduty_gets_an_events_v2_trigger(channel: Any) -> None:
    with receiving([202]) as hook:
        channel("pd", kind="pagerduty", url=hook.url, address="R0UT1NGKEY")
        region_event("eu-west", "healthy", "down")
        run(1)
        (body,) = hook.bodies
        assert body["routing_key"] == "R0UT1NGKEY" and body["event_action"] == "trigger"
        assert body["dedup_key"] == "region_down:eu-west"
        payload = body["payload"]
        assert payload["severity"] == "critical" and payload["source"] == "eu-west"
        assert payload["class"] == "region_down" and payload["group"] == "eu-west"
        assert payload["timestamp"].startswith("2027-01-15T08:00:00")


def test_email_goes_through_the_mail_backend(channel: Any, mailoutbox: Any) -> None:
    from regions.models import Notification

    channel("mail", kind="email", address="oncall@example.net")
    region_event("eu-west", "healthy", "down")
    run(1)
    (mail,) = mailoutbox
    assert mail.to == ["oncall@example.net"]
    assert mail.subject == "[trafficmgr] critical: region_down eu-west"
    assert "healthy → down" in mail.body
    assert Notification.objects.get().status == "delivered"
