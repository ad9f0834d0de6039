"""Who may see what is said about tokens, and which tokens the API will not revoke.

Audit rows about tokens (who created, revoked or rebound which token) are for admins: the
token list is admin-only, so its history is too. Revoking the token the request itself
uses, or the last active admin token, would lock the caller (or everyone) out of the API:
both are refused with a 409 saying why, and nothing changes.
"""

from __future__ import annotations

from typing import Any

import pytest

from regions.models import ApiToken
from tests.regions.api.api_calls import API, assert_error, send_json

pytestmark = pytest.mark.django_db
TOKEN_TYPES = {"ApiToken", "AgentToken"}


@pytest.fixture
def token_history(world: Any, admin_client: Any) -> dict[str, Any]:
    """Token rows in the audit log (created, revoked, an agent token) beside fleet rows."""
    created = send_json(
        admin_client, "POST", f"{API}/tokens/", {"name": "ci", "role": "viewer"}
    ).json()
    send_json(
        admin_client,
        "POST",
        f"{API}/tokens/",
        {"name": "agent", "role": "agent", "region": "eu-west"},
    )
    assert admin_client.delete(f"{API}/tokens/{created['id']}/").status_code == 204
    send_json(admin_client, "PATCH", f"{API}/regions/eu-west/", {"priority": 4})
    return created


def audit_rows(client: Any, query: str = "") -> list[dict[str, Any]]:
    response = client.get(f"{API}/audit/?limit=1000{query}")
    assert response.status_code == 200, response.content
    rows: list[dict[str, Any]] = response.json()["results"]
    return rows


def test_admins_see_audit_rows_about_tokens(token_history: Any, admin_client: Any) -> None:
    types = {row["object_type"] for row in audit_rows(admin_client)}
    assert types >= TOKEN_TYPES and "Region" in types


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_others_never_see_audit_rows_about_tokens(
    token_history: Any, admin_client: Any, make_client: Any, role: str
) -> None:
    reader = make_client(role, name=f"reader-{role}")
    rows = audit_rows(reader)
    assert rows and not {row["object_type"] for row in rows} & TOKEN_TYPES
    assert "Region" in {row["object_type"] for row in rows}
    assert audit_rows(reader, "&object_type=ApiToken") == []
    # Not by count, page or id either.
    everything = audit_rows(admin_client)
    assert reader.get(f"{API}/audit/").json()["count"] == len(everything) - sum(
        row["object_type"] in TOKEN_TYPES for row in everything
    )
    hidden = next(row for row in everything if row["object_type"] in TOKEN_TYPES)
    assert_error(reader.get(f"{API}/audit/{hidden['id']}/"), 404)
    shown = next(row for row in everything if row["object_type"] == "Region")
    assert reader.get(f"{API}/audit/{shown['id']}/").status_code == 200


def test_the_token_in_use_cannot_be_revoked(
    admin_client: Any, make_client: Any, unchanged: Any
) -> None:
    make_client("admin", name="second-admin")  # not the last admin: only "in use" applies
    own = ApiToken.objects.get(name="test-admin")
    for method, path in (
        ("DELETE", f"tokens/api-{own.pk}/"),
        ("POST", f"tokens/api-{own.pk}/revoke/"),
    ):
        with unchanged():
            body = assert_error(admin_client.generic(method, f"{API}/{path}"), 409)
        assert body["error"] == "token_in_use" and "this request" in body["detail"], body
    assert admin_client.get(f"{API}/regions/").status_code == 200


def test_the_last_admin_token_cannot_be_revoked(
    admin_client: Any, make_client: Any, unchanged: Any
) -> None:
    second = make_client("admin", name="second-admin")
    first = ApiToken.objects.get(name="test-admin")
    assert second.delete(f"{API}/tokens/api-{first.pk}/").status_code == 204
    make_client("viewer", name="a-viewer")
    own = ApiToken.objects.get(name="second-admin")
    # Another admin is about, but only with a session: tokens are what automation holds.
    with unchanged():
        body = assert_error(second.post(f"{API}/tokens/api-{own.pk}/revoke/"), 409)
    assert body["error"] in {"token_in_use", "last_admin_token"}
    third = make_client("admin", name="third-admin")
    assert third.delete(f"{API}/tokens/api-{own.pk}/").status_code == 204
    last = ApiToken.objects.get(name="third-admin")
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    site = APIClient()
    site.force_authenticate(User.objects.create_superuser("root", "root@example.test", "pw"))
    with unchanged():
        body = assert_error(site.delete(f"{API}/tokens/api-{last.pk}/"), 409)
    assert body["error"] == "last_admin_token" and "last" in body["detail"], body


def test_revoking_other_tokens_still_works(admin_client: Any, make_client: Any) -> None:
    make_client("admin", name="spare-admin")
    spare = ApiToken.objects.get(name="spare-admin")
    assert admin_client.post(f"{API}/tokens/api-{spare.pk}/revoke/").status_code == 200
    again = admin_client.post(f"{API}/tokens/api-{spare.pk}/revoke/")
    assert again.status_code == 200  # revoking a revoked token is still a no-op
