"""The silences API: operators mute by matchers until an expiry, viewers read, bad input is
refused naming the field; a silence made through the API mutes the notifier."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from tests.regions.alerts.events import endpoint_event
from tests.regions.api.api_calls import assert_error

pytestmark = pytest.mark.django_db
SILENCES = "/api/v1/silences/"


def later(hours: float) -> str:
    return (timezone.now() + dt.timedelta(hours=hours)).isoformat()


def test_an_operator_mutes_an_endpoints_alerts(
    operator_client: Any, viewer_client: Any, channel: Any
) -> None:
    from regions.alerts.notifier import route_new_events
    from regions.models import Notification

    channel("ops", url="http://127.0.0.1:9/x")
    body = {"matchers": {"region": "eu-west", "name": "endpoint_ejected"}, "expires_at": later(2)}
    made = operator_client.post(SILENCES, body, format="json")
    assert made.status_code == 201, made.content
    doc = made.json()
    assert doc["active"] is True and doc["created_by"] and doc["matchers"] == body["matchers"]
    listed = viewer_client.get(SILENCES).json()["results"]
    assert [s["id"] for s in listed] == [doc["id"]]
    assert viewer_client.delete(f"{SILENCES}{doc['id']}/").status_code == 403
    Notification.objects.all().delete()
    endpoint_event("eu-west", "euw-1", healthy=False)
    route_new_events(timezone.now())
    assert not Notification.objects.exists()
    assert operator_client.delete(f"{SILENCES}{doc['id']}/").status_code == 204
    assert viewer_client.get(f"{SILENCES}{doc['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"matchers": {}, "expires_at": later(1)}, "matchers"),
        ({"matchers": {"colour": "red"}, "expires_at": later(1)}, "matchers"),
        ({"matchers": {"name": "region_gone"}, "expires_at": later(1)}, "matchers"),
        ({"matchers": {"severity": "dire"}, "expires_at": later(1)}, "matchers"),
        ({"matchers": {"region": "eu-west"}, "expires_at": later(-1)}, "expires_at"),
        ({"matchers": {"region": "eu-west"}, "expires_at": later(24 * 91)}, "expires_at"),
        ({"matchers": {"region": "eu-west"}}, "expires_at"),
        ({"matchers": {"region": "eu-west"}, "expires_at": "soon"}, "expires_at"),
    ],
)
def test_a_bad_silence_is_a_400_naming_the_field(
    operator_client: Any, body: dict[str, Any], field: str
) -> None:
    from regions.models import Silence

    assert_error(operator_client.post(SILENCES, body, format="json"), 400, field)
    assert not Silence.objects.exists()
