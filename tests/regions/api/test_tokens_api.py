"""Tokens over the REST API: the secret shown once, stored hashed, revocable, admin only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from regions.access.tokens import hash_secret
from regions.models import AgentToken, ApiToken
from tests.regions.api.api_calls import API, assert_error, send_json

pytestmark = pytest.mark.django_db

LISTED = {
    "id",
    "name",
    "prefix",
    "role",
    "region",
    "created_at",
    "created_by",
    "last_used_at",
    "revoked_at",
    "active",
}


def _client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_create_returns_the_secret_once_and_stores_its_hash(admin_client: Any) -> None:
    response = send_json(
        admin_client, "POST", f"{API}/tokens/", {"name": "ci-deployer", "role": "operator"}
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    secret = body["secret"]
    assert secret.startswith("tmk_") and body["prefix"] == secret[:12]
    assert (body["role"], body["active"], body["created_by"]) == (
        "operator",
        True,
        "token:test-admin",
    )
    token = ApiToken.objects.get(name="ci-deployer")
    assert token.key_hash == hash_secret(secret)
    assert secret not in json.dumps(list(ApiToken.objects.values()), default=str)
    shown = admin_client.get(f"{API}/tokens/{body['id']}/").json()
    assert "secret" not in shown and "key_hash" not in shown
    assert _client(secret).get(f"{API}/regions/").status_code == 200


def test_list_never_shows_secrets_or_hashes(world: Any, admin_client: Any) -> None:
    send_json(admin_client, "POST", f"{API}/tokens/", {"name": "a", "role": "viewer"})
    response = admin_client.get(f"{API}/tokens/")
    rows = response.json()["results"]
    assert {r["name"] for r in rows} == {"a", "test-admin"}
    for row in rows:
        assert set(row) == LISTED
    raw = response.content.decode()
    for token in ApiToken.objects.all():
        assert token.key_hash not in raw


def test_agent_token_is_bound_to_a_region(world: Any, admin_client: Any) -> None:
    response = send_json(
        admin_client,
        "POST",
        f"{API}/tokens/",
        {"name": "euw-agent", "role": "agent", "region": "eu-west"},
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["secret"].startswith("tma_")
    assert (body["role"], body["region"]) == ("agent", "eu-west")
    assert body["id"].startswith("agent-")
    token = AgentToken.objects.get(name="euw-agent")
    assert sorted(token.endpoints.values_list("name", flat=True)) == ["euw-1", "euw-2"]
    listed = admin_client.get(f"{API}/tokens/?role=agent").json()["results"]
    assert [t["name"] for t in listed] == ["euw-agent"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "role": "agent"}, "region"),
        ({"name": "x", "role": "agent", "region": "atlantis"}, "region"),
        ({"name": "x", "role": "viewer", "region": "eu-west"}, "region"),
        ({"name": "x", "role": "root"}, "role"),
        ({"name": "", "role": "viewer"}, "name"),
        ({"name": "x" * 101, "role": "viewer"}, "name"),
        ({"role": "viewer"}, "name"),
        ({"name": "x", "role": "viewer", "secret": "tmk_mine"}, "secret"),
    ],
)
def test_bad_token_requests_are_refused(
    world: Any, admin_client: Any, unchanged: Any, body: dict[str, Any], field: str
) -> None:
    with unchanged():
        assert_error(send_json(admin_client, "POST", f"{API}/tokens/", body), 400, field)


def test_revoke_by_delete_keeps_the_row(admin_client: Any, make_client: Any) -> None:
    victim = make_client("viewer", name="leaked")
    token = ApiToken.objects.get(name="leaked")
    assert victim.get(f"{API}/regions/").status_code == 200
    assert admin_client.delete(f"{API}/tokens/api-{token.pk}/").status_code == 204
    token.refresh_from_db()
    assert token.revoked_at is not None
    body = assert_error(victim.get(f"{API}/regions/"), 401)
    assert body["error"] == "authentication_failed"
    row = admin_client.get(f"{API}/tokens/api-{token.pk}/").json()
    assert row["active"] is False and row["revoked_at"]


def test_revoke_action_is_idempotent(admin_client: Any, make_client: Any) -> None:
    make_client("operator", name="old")
    token = ApiToken.objects.get(name="old")
    first = admin_client.post(f"{API}/tokens/api-{token.pk}/revoke/").json()
    second = admin_client.post(f"{API}/tokens/api-{token.pk}/revoke/").json()
    assert first["revoked_at"] == second["revoked_at"] is not None
    assert admin_client.get(f"{API}/tokens/?active=false").json()["count"] == 1


def test_unknown_token_id_is_404(admin_client: Any) -> None:
    assert_error(admin_client.get(f"{API}/tokens/api-999999/"), 404)
    assert_error(admin_client.delete(f"{API}/tokens/agent-999999/"), 404)


@pytest.mark.parametrize(
    "name",
    [
        "'; DROP TABLE regions; --",
        "<script>alert(1)</script>",
        "Robert'); DELETE FROM regions_apitoken;--",
        "名前 ✓",
    ],
)
def test_token_names_round_trip_unchanged(world: Any, admin_client: Any, name: str) -> None:
    response = send_json(admin_client, "POST", f"{API}/tokens/", {"name": name, "role": "viewer"})
    assert response.status_code == 201, response.json()
    assert response.json()["name"] == name
    assert admin_client.get(f"{API}/tokens/{response.json()['id']}/").json()["name"] == name
    assert ApiToken.objects.get(pk=int(response.json()["id"].split("-")[1])).name == name
    assert admin_client.get(f"{API}/regions/").json()["count"] == 3
