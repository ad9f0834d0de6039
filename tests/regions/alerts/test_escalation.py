"""A page nobody acknowledges in time goes on to the channel's ``escalate_to``; an
acknowledged one does not; only pages (critical) escalate."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.alerts.conftest import run
from tests.regions.alerts.events import region_event
from tests.regions.alerts.receiver import receiving

pytestmark = pytest.mark.django_db
AFTER_S = 600


@pytest.fixture(autouse=True)
def _escalate_after(settings: Any) -> None:
    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "ALERTS_ESCALATE_AFTER_S": AFTER_S}


def test_an_unacknowledged_page_escalates_to_the_next_channel(channel: Any) -> None:
    from regions.models import Notification

    with receiving([200]) as first, receiving([200]) as second:
        lead = channel("lead", url=second.url, events=["drill_failed"])
        channel("oncall", url=first.url, escalate_to=lead)
        region_event("eu-west", "healthy", "down")
        region_event("us-east", "healthy", "degraded")  # a warning: never escalates
        run(1)
        run(AFTER_S)
        assert second.bodies == []  # not yet: delivered at 1 s, overdue after 601 s
        run(AFTER_S + 2)
        assert [b["event"] for b in second.bodies] == ["region_down"]
        page = Notification.objects.get(channel_name="oncall", name="region_down")
        assert page.escalated
        escalated = Notification.objects.get(channel_name="lead")
        assert escalated.origin_id == page.pk and escalated.status == "delivered"
        run(AFTER_S * 3)
        assert len(second.bodies) == 1  # escalated once


def test_an_acknowledged_page_does_not_escalate(channel: Any, operator_client: Any) -> None:
    from regions.models import Notification

    with receiving([200]) as first, receiving([200]) as second:
        lead = channel("lead", url=second.url, events=["drill_failed"])
        channel("oncall", url=first.url, escalate_to=lead)
        region_event("eu-west", "healthy", "down")
        run(1)
        page = Notification.objects.get()
        acked = operator_client.post(f"/api/v1/notifications/{page.pk}/acknowledge")
        assert acked.status_code == 200, acked.content
        assert acked.json()["acknowledged_at"] and acked.json()["acknowledged_by"]
        run(AFTER_S * 2)
        assert second.bodies == [] and Notification.objects.count() == 1


def test_a_viewer_cannot_acknowledge(channel: Any, viewer_client: Any) -> None:
    from regions.models import Notification

    channel("oncall", url="http://127.0.0.1:9/x")
    region_event("eu-west", "healthy", "down")
    from regions.alerts.notifier import route_new_events
    from tests.regions.alerts.conftest import at

    route_new_events(at(1))
    page = Notification.objects.get()
    assert viewer_client.post(f"/api/v1/notifications/{page.pk}/acknowledge").status_code == 403
