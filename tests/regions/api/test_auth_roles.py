"""Who may do what: 401 without a valid token, 403 for a role that may not."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from regions.models import ApiToken
from tests.regions.api.api_calls import API, NEW_REGION, assert_error, send_json

pytestmark = pytest.mark.django_db

CONFIG_LISTS = [
    "regions",
    "endpoints",
    "gpu-profiles",
    "residency-rules",
    "failover-policies",
    "events",
    "audit",
]


def test_no_token_is_401_with_www_authenticate(world: Any, anon_client: Any) -> None:
    response = anon_client.get(f"{API}/regions/")
    body = assert_error(response, 401)
    assert body["error"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "header", ["Bearer tmk_not-a-real-token", "Bearer", "Bearer a b", "Bearer tma_unknown-agent"]
)
def test_invalid_token_is_401(world: Any, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(f"{API}/regions/")
    assert_error(response, 401)
    assert response["WWW-Authenticate"] == "Bearer"


def test_non_ascii_token_is_401(world: Any) -> None:
    client = APIClient()
    response = client.get(f"{API}/regions/", HTTP_AUTHORIZATION="Bearer tmk_caf\u00e9")
    assert_error(response, 401)


def test_revoked_token_is_401(world: Any, make_client: Any) -> None:
    client = make_client("admin", name="gone")
    ApiToken.objects.filter(name="gone").update(revoked_at="2024-01-01T00:00:00Z")
    assert_error(client.get(f"{API}/regions/"), 401)


@pytest.mark.parametrize("path", CONFIG_LISTS)
def test_viewer_reads_everything_configured(world: Any, viewer_client: Any, path: str) -> None:
    assert viewer_client.get(f"{API}/{path}/").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("POST", "regions/", NEW_REGION),
        ("PATCH", "regions/eu-west/", {"priority": 3}),
        ("DELETE", "endpoints/euw-1/", None),
        ("PUT", "failover-policies/default/", {"name": "default"}),
        ("POST", "tokens/", {"name": "mine", "role": "admin"}),
    ],
)
def test_viewer_writing_is_403(
    world: Any, viewer_client: Any, unchanged: Any, method: str, path: str, data: Any
) -> None:
    with unchanged():
        body = assert_error(send_json(viewer_client, method, f"{API}/{path}", data), 403)
    assert body["error"] == "permission_denied"


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("POST", "regions/", NEW_REGION),
        ("DELETE", "regions/ap-south/", None),
        ("PATCH", "residency-rules/india-local/", {"mode": "preferred"}),
        ("POST", "tokens/", {"name": "escalate", "role": "admin"}),
        ("GET", "tokens/", None),
    ],
)
def test_operator_doing_an_admin_only_action_is_403(
    world: Any, operator_client: Any, unchanged: Any, method: str, path: str, data: Any
) -> None:
    with unchanged():
        assert_error(send_json(operator_client, method, f"{API}/{path}", data), 403)


@pytest.mark.parametrize("path", [*CONFIG_LISTS, "tokens"])
def test_agent_token_is_403_on_config_routes(world: Any, agent_client: Any, path: str) -> None:
    assert_error(agent_client.get(f"{API}/{path}/"), 403)


def test_agent_token_cannot_write_config(world: Any, agent_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(
            send_json(agent_client, "PATCH", f"{API}/endpoints/euw-1/", {"weight": 100}), 403
        )


def test_admin_writes(world: Any, admin_client: Any) -> None:
    assert send_json(admin_client, "POST", f"{API}/regions/", NEW_REGION).status_code == 201


def test_signed_in_superuser_reads_with_a_session(world: Any) -> None:
    user = User.objects.create_superuser("root", "root@example.test", "pw-not-used-anywhere")
    client = APIClient()
    client.force_login(user)
    assert client.get(f"{API}/regions/").status_code == 200
