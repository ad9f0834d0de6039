"""The Django admin: pages render, history is read-only, token hashes never appear."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.test import Client

from regions.access.issue import create_token
from regions.models import (
    ApiToken,
    AuditLog,
    Drill,
    Endpoint,
    Event,
    Region,
    RoutingTableVersion,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def site_admin(client: Client, admin_user: Any) -> Client:
    """A signed-in superuser (pytest-django's ``admin_client`` is the API's admin token here)."""
    client.force_login(admin_user)
    return client


def url(model: type[Any], view: str = "changelist", *args: Any) -> str:
    return (
        f"/admin/regions/{model._meta.model_name}/"
        + {
            "changelist": "",
            "add": "add/",
            "change": f"{args[0] if args else ''}/change/",
            "delete": f"{args[0] if args else ''}/delete/",
        }[view]
    )


def test_every_regions_model_is_registered() -> None:
    registered = {m for m in admin.site._registry if m._meta.app_label == "regions"}
    assert {Region, Endpoint, ApiToken, AuditLog, Event, RoutingTableVersion, Drill} <= registered


def test_changelists_render(world: Any, site_admin: Client) -> None:
    for model in admin.site._registry:
        if model._meta.app_label != "regions":
            continue
        response = site_admin.get(url(model))
        assert response.status_code == 200, model


def test_region_page_inlines_its_endpoints(world: Any, site_admin: Client) -> None:
    pk = Region.objects.get(name="eu-west").pk
    page = site_admin.get(url(Region, "change", pk)).content.decode()
    assert "euw-1" in page and "euw-2" in page and "use-1" not in page


def test_endpoint_list_filters_by_region_and_state(world: Any, site_admin: Client) -> None:
    pk = Region.objects.get(name="us-east").pk
    page = site_admin.get(url(Endpoint) + f"?region__id__exact={pk}").content.decode()
    assert "use-1" in page and "euw-1" not in page
    page = site_admin.get(url(Endpoint) + "?q=aps").content.decode()
    assert "aps-1" in page and "use-1" not in page
    page = site_admin.get(url(Region) + "?admin_state__exact=drained").content.decode()
    assert "us-east" in page and "eu-west" not in page


def test_history_is_read_only(world: Any, site_admin: Client) -> None:
    Event.objects.create(at="2026-01-01T00:00:00Z", kind="config", message="hello")
    for model in (AuditLog, Event):
        obj = model.objects.first()
        assert site_admin.get(url(model, "add")).status_code == 403
        assert site_admin.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
        page = site_admin.get(url(model, "change", obj.pk))
        assert page.status_code == 200  # view only
        assert b'name="_save"' not in page.content
    assert AuditLog.objects.filter(pk=AuditLog.objects.first().pk).exists()


def test_token_admin_never_shows_the_hash(world: Any, site_admin: Client) -> None:
    token, secret = create_token("ci", "operator")
    for page in (site_admin.get(url(ApiToken)), site_admin.get(url(ApiToken, "change", token.pk))):
        assert page.status_code == 200
        text = page.content.decode()
        assert token.key_hash not in text and secret not in text
        assert "key_hash" not in text
    searched = site_admin.get(url(ApiToken) + f"?q={token.key_hash}").content.decode()
    assert "0 results" in searched  # the hash is not searchable either
    assert site_admin.get(url(ApiToken, "add")).status_code == 403


def test_revoke_action_revokes_and_is_audited(world: Any, site_admin: Client) -> None:
    token, _ = create_token("ci", "viewer")
    response = site_admin.post(url(ApiToken), {"action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    row = AuditLog.objects.filter(object_type="ApiToken", action="update").first()
    assert row is not None and row.actor == "admin" and row.actor_type == "user"
