"""The alerts API: channels by name (admin edits, operator tests, viewer reads), bad input
refused naming the field, test sends delivered by the worker, notifications listed."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from tests.regions.alerts.receiver import receiving
from tests.regions.api.api_calls import assert_error

pytestmark = pytest.mark.django_db
CHANNELS = "/api/v1/alert-channels/"
NOTIFICATIONS = "/api/v1/notifications/"
HOOK = {"kind": "webhook", "url": "https://alerts.example.net/hook"}


def test_admin_creates_reads_updates_and_deletes_a_channel_by_name(
    admin_client: Any, viewer_client: Any
) -> None:
    body = {
        "name": "ops-hook",
        "kind": "webhook",
        "url": "https://alerts.example.net/hook",
        "min_severity": "error",
        "events": ["region_down", "endpoint_ejected"],
    }
    created = admin_client.post(CHANNELS, body, format="json")
    assert created.status_code == 201, created.content
    got = admin_client.get(f"{CHANNELS}ops-hook/").json()
    assert {k: got[k] for k in body} == body
    assert got["enabled"] is True and got["disabled_reason"] == ""
    patched = admin_client.patch(f"{CHANNELS}ops-hook/", {"events": None}, format="json")
    assert patched.status_code == 200 and patched.json()["events"] is None
    assert [c["name"] for c in viewer_client.get(CHANNELS).json()["results"]] == ["ops-hook"]
    assert admin_client.delete(f"{CHANNELS}ops-hook/").status_code == 204
    assert viewer_client.get(f"{CHANNELS}ops-hook/").status_code == 404


def test_readers_below_admin_see_no_credentials(admin_client: Any, viewer_client: Any) -> None:
    slack = {"name": "chat", "kind": "slack", "url": "https://hooks.example.net/T0/B0/s3cret"}
    pd = {"name": "pd", "kind": "pagerduty", "address": "R0UT1NGKEY0123456789"}
    for body in (slack, pd):
        assert admin_client.post(CHANNELS, body, format="json").status_code == 201
    assert admin_client.get(f"{CHANNELS}chat/").json()["url"] == slack["url"]
    seen = {c["name"]: c for c in viewer_client.get(CHANNELS).json()["results"]}
    assert seen["chat"]["url"] == "https://hooks.example.net/…"
    assert seen["pd"]["address"] == "…6789"


def test_roles_viewer_reads_operator_tests_admin_edits(
    channel: Any, viewer_client: Any, operator_client: Any
) -> None:
    channel("ops", url="http://127.0.0.1:9/hook")
    assert viewer_client.get(CHANNELS).status_code == 200
    assert viewer_client.post(f"{CHANNELS}ops/test").status_code == 403
    new = {"name": "x", "kind": "slack", "url": "https://hooks.example.net/x"}
    assert operator_client.post(CHANNELS, new, format="json").status_code == 403
    assert operator_client.delete(f"{CHANNELS}ops/").status_code == 403
    assert operator_client.post(f"{CHANNELS}ops/test").status_code == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "webhook", "url": "ftp://alerts.example.net/x"}, "url"),
        ({"kind": "webhook", "url": "file:///etc/passwd"}, "url"),
        ({"kind": "webhook", "url": "hooks.example.net/x"}, "url"),
        ({"kind": "slack", "url": ""}, "url"),
        ({"kind": "webhook", "url": "http://testserver/api/v1/route"}, "url"),
        ({"kind": "webhook", "url": "http://TESTSERVER:80/x"}, "url"),
        ({"kind": "sms", "url": "https://alerts.example.net/x"}, "kind"),
        ({**HOOK, "min_severity": "dire"}, "min_severity"),
        ({**HOOK, "events": ["region_gone"]}, "events"),
        ({**HOOK, "events": "region_down"}, "events"),
        ({"kind": "email", "address": "not an address"}, "address"),
        ({"kind": "email", "address": "ops@example.net", "url": HOOK["url"]}, "url"),
        ({"kind": "pagerduty", "address": ""}, "address"),
        ({**HOOK, "fallback": "nobody"}, "fallback"),
        ({**HOOK, "colour": "red"}, "colour"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    admin_client: Any, body: dict[str, Any], field: str
) -> None:
    from regions.models import AlertChannel

    response = admin_client.post(CHANNELS, {"name": "bad", **body}, format="json")
    assert_error(response, 400, field)
    assert not AlertChannel.objects.exists()


@pytest.mark.parametrize(
    "url", ["http://localhost:8000/hook", "http://127.0.0.2:8000/", "http://[::1]:8000/x"]
)
def test_the_control_plane_is_refused_under_any_loopback_name(admin_client: Any, url: str) -> None:
    body = {"name": "self", "kind": "webhook", "url": url}
    refused = admin_client.post(CHANNELS, body, format="json", HTTP_HOST="127.0.0.1:8000")
    assert_error(refused, 400, "url")
    elsewhere = {**body, "url": url.replace("8000", "9000")}  # another port: a local receiver
    ok = admin_client.post(CHANNELS, elsewhere, format="json", HTTP_HOST="127.0.0.1:8000")
    assert ok.status_code == 201, ok.content


def test_email_and_pagerduty_channels_take_an_address(admin_client: Any) -> None:
    mail = {"name": "mail", "kind": "email", "address": "oncall@example.net"}
    pd = {"name": "pd", "kind": "pagerduty", "address": "R0UT1NGKEY0123456789", "url": ""}
    assert admin_client.post(CHANNELS, mail, format="json").status_code == 201
    assert admin_client.post(CHANNELS, pd, format="json").status_code == 201


def test_a_test_send_is_queued_then_delivered_by_the_worker(
    channel: Any, operator_client: Any
) -> None:
    from regions.alerts.service import run_once

    with receiving([200]) as hook:
        channel("ops", url=hook.url)
        queued = operator_client.post(f"{CHANNELS}ops/test")
        assert queued.status_code == 202
        doc = queued.json()
        assert (doc["event"], doc["channel"], doc["status"], doc["attempts"]) == (
            "test",
            "ops",
            "pending",
            0,
        )
        assert hook.bodies == []  # the request never waits on the receiver
        run_once(timezone.now())
        listed = operator_client.get(f"{NOTIFICATIONS}?channel=ops").json()["results"]
        assert [(n["event"], n["status"], n["attempts"]) for n in listed] == [
            ("test", "delivered", 1)
        ]
        assert hook.bodies[0]["event"] == "test" and hook.bodies[0]["channel"] == "ops"


def test_notifications_filter_by_status_and_refuse_unknown_values(viewer_client: Any) -> None:
    assert viewer_client.get(f"{NOTIFICATIONS}?status=failed").status_code == 200
    assert_error(viewer_client.get(f"{NOTIFICATIONS}?status=lost"), 400, "status")
    assert viewer_client.get(f"{NOTIFICATIONS}999/").status_code == 404


def test_channel_changes_are_audited_for_admins_only(admin_client: Any, viewer_client: Any) -> None:
    admin_client.post(CHANNELS, {"name": "ops", **HOOK}, format="json")
    admin_client.patch(f"{CHANNELS}ops/", {"min_severity": "critical"}, format="json")
    rows = admin_client.get("/api/v1/audit/?object_type=AlertChannel").json()["results"]
    assert [(r["action"], r["object_repr"]) for r in rows] == [("update", "ops"), ("create", "ops")]
    assert viewer_client.get("/api/v1/audit/?object_type=AlertChannel").json()["results"] == []
