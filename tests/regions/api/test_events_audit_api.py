"""Events and the audit log: read-only, newest first, filterable; API writes are audited."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from regions.models import AuditLog, Event
from tests.regions.api.api_calls import API, assert_error, send_json

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def events(db: None) -> list[Event]:
    rows = [
        Event(at=T0, kind="health", region="eu-west", endpoint="euw-1", message="euw-1 down"),
        Event(
            at=T0 + dt.timedelta(minutes=1),
            kind="failover",
            region="eu-west",
            message="eu-west drained",
        ),
        Event(
            at=T0 + dt.timedelta(minutes=2), kind="drill", region="us-east", message="drill started"
        ),
        Event(
            at=T0 + dt.timedelta(minutes=3),
            kind="action",
            severity="warning",
            message="'; DROP TABLE regions; -- <script>alert(1)</script>",
        ),
    ]
    return Event.objects.bulk_create(rows)


def _messages(response: Any) -> list[str]:
    assert response.status_code == 200, response.json()
    return [e["message"] for e in response.json()["results"]]


def test_events_newest_first(events: list[Event], viewer_client: Any) -> None:
    assert _messages(viewer_client.get(f"{API}/events/")) == [
        "'; DROP TABLE regions; -- <script>alert(1)</script>",
        "drill started",
        "eu-west drained",
        "euw-1 down",
    ]


def test_events_oldest_first_on_request(events: list[Event], viewer_client: Any) -> None:
    assert _messages(viewer_client.get(f"{API}/events/?ordering=at"))[0] == "euw-1 down"


def test_events_filtered_by_region_kind_and_since(events: list[Event], viewer_client: Any) -> None:
    assert _messages(viewer_client.get(f"{API}/events/?region=eu-west")) == [
        "eu-west drained",
        "euw-1 down",
    ]
    assert _messages(viewer_client.get(f"{API}/events/?kind=drill")) == ["drill started"]
    since = (T0 + dt.timedelta(minutes=1)).isoformat()
    assert _messages(
        viewer_client.get(f"{API}/events/", {"since": since, "region": "eu-west"})
    ) == ["eu-west drained"]
    until = (T0 + dt.timedelta(minutes=1)).isoformat()
    assert _messages(viewer_client.get(f"{API}/events/", {"until": until})) == ["euw-1 down"]
    assert len(_messages(viewer_client.get(f"{API}/events/?since=2026-03-01"))) == 4


@pytest.mark.parametrize(
    ("query", "param"),
    [("since=yesterday", "since"), ("kind=gossip", "kind"), ("ordering=message", "ordering")],
)
def test_bad_event_filters_are_400(
    events: list[Event], viewer_client: Any, query: str, param: str
) -> None:
    assert_error(viewer_client.get(f"{API}/events/?{query}"), 400, param)


def test_event_messages_round_trip_unchanged(events: list[Event], viewer_client: Any) -> None:
    event = viewer_client.get(f"{API}/events/{events[-1].pk}/").json()
    assert event["message"] == "'; DROP TABLE regions; -- <script>alert(1)</script>"
    assert event["severity"] == "warning"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_events_cannot_be_written(
    events: list[Event], admin_client: Any, unchanged: Any, method: str
) -> None:
    path = f"{API}/events/" if method == "POST" else f"{API}/events/{events[0].pk}/"
    with unchanged():
        assert_error(send_json(admin_client, method, path, {"message": "forged"}), 405)


def test_api_write_is_audited_with_actor_source_and_before_after(
    world: Any, make_client: Any
) -> None:
    client = make_client("admin", name="ops-bot")
    response = send_json(client, "PATCH", f"{API}/regions/eu-west/", {"priority": 7})
    assert response.status_code == 200, response.json()
    row = AuditLog.objects.filter(object_type="Region", object_repr="eu-west").first()
    assert row is not None
    assert (row.actor, row.actor_type, row.source, row.action) == (
        "token:ops-bot",
        "token",
        "127.0.0.1",
        "update",
    )
    assert (row.before["priority"], row.after["priority"]) == (1, 7)
    shown = client.get(f"{API}/audit/?object=eu-west&action=update").json()["results"][0]
    assert shown["actor"] == "token:ops-bot"
    assert (shown["before"]["priority"], shown["after"]["priority"]) == (1, 7)


def test_token_creation_and_revocation_are_audited_without_secrets(admin_client: Any) -> None:
    created = send_json(
        admin_client, "POST", f"{API}/tokens/", {"name": "ci", "role": "viewer"}
    ).json()
    admin_client.delete(f"{API}/tokens/{created['id']}/")
    rows = [
        r
        for r in admin_client.get(f"{API}/audit/?object_type=ApiToken").json()["results"]
        if r["object_id"] == created["id"].removeprefix("api-")
    ]
    assert [r["action"] for r in rows] == ["update", "create"]
    assert rows[0]["before"]["revoked_at"] is None and rows[0]["after"]["revoked_at"]
    for row in rows:
        assert "key_hash" not in (row["after"] or {})
        assert created["secret"] not in str(row)


def test_refused_write_leaves_no_audit_row(world: Any, admin_client: Any) -> None:
    before = AuditLog.objects.count()
    send_json(admin_client, "PATCH", f"{API}/regions/eu-west/", {"lat": 100})
    assert AuditLog.objects.count() == before


def test_audit_filtered_by_since(world: Any, viewer_client: Any) -> None:
    future = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    assert viewer_client.get(f"{API}/audit/", {"since": future}).json()["count"] == 0
    assert viewer_client.get(f"{API}/audit/?actor=fixture:world").json()["count"] > 0


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_audit_log_cannot_be_changed_through_the_api(
    world: Any, admin_client: Any, unchanged: Any, method: str
) -> None:
    row = AuditLog.objects.filter(actor="fixture:world").first()
    assert row is not None
    path = f"{API}/audit/" if method == "POST" else f"{API}/audit/{row.pk}/"
    with unchanged():
        body = assert_error(send_json(admin_client, method, path, {"actor": "nobody"}), 405)
    assert body["error"] == "method_not_allowed"
    row.refresh_from_db()
    assert row.actor == "fixture:world"


def test_viewer_writing_to_audit_is_403(world: Any, viewer_client: Any) -> None:
    row = AuditLog.objects.first()
    assert row is not None
    assert_error(viewer_client.delete(f"{API}/audit/{row.pk}/"), 403)


@pytest.mark.parametrize(
    "since", ["0646-12-21T19:06:15.08-17:24", "0001-01-01T00:00:00+01:00", "2026-03-01T00:00+14:00"]
)
def test_odd_but_valid_timestamps_are_compared_in_utc(viewer_client: Any, since: str) -> None:
    """Offsets PostgreSQL refuses, or instants before year 1 in UTC: an answer, never a 500."""
    from urllib.parse import quote

    response = viewer_client.get(f"{API}/events/?since={quote(since)}")
    assert response.status_code in {200, 400}, response.content
    if response.status_code == 400:
        assert "since" in response.json()["fields"]
