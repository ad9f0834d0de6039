"""The dashboard's pages: login, roles on the page, and actions going through the API."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from regions.models import Endpoint, Region

PASSWORD = "a-long-test-password"


def signed_in(user: Any, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def page_token(html: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def test_the_dashboard_redirects_to_the_login_page(db: None) -> None:
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def test_the_login_page_is_djangos_username_password_form(db: None) -> None:
    html = Client().get("/login/?next=/").content.decode()
    assert 'name="username"' in html and 'name="password"' in html
    assert 'name="next" value="/"' in html


def test_signing_in_leads_to_the_dashboard(make_user: Any) -> None:
    make_user("viewer")
    client = Client()
    response = client.post(
        "/login/", {"username": "viewer-user", "password": PASSWORD, "next": "/"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused(make_user: Any) -> None:
    make_user("viewer")
    response = Client().post("/login/", {"username": "viewer-user", "password": "nope"})
    assert response.status_code == 200
    assert "Wrong username or password" in response.content.decode()


def test_a_viewer_sees_no_action_buttons(world: Any, make_user: Any) -> None:
    html = signed_in(make_user("viewer")).get("/").content.decode()
    assert 'id="map"' in html and 'id="regions-table"' in html and 'id="events"' in html
    assert "data-action" not in html
    assert 'id="action-dialog"' not in html
    assert 'href="/admin/"' not in html
    assert '"can_act": false' in html  # the boot data the scripts read


def test_an_operator_has_action_buttons(world: Any, make_user: Any) -> None:
    html = signed_in(make_user("operator")).get("/").content.decode()
    for verb in ("drain", "undrain", "weight"):
        assert f'data-action="{verb}"' in html
    assert 'id="action-dialog"' in html
    assert '"can_act": true' in html
    assert 'href="/admin/"' not in html


def test_an_admin_gets_the_admin_link(world: Any, django_user_model: Any) -> None:
    admin = django_user_model.objects.create_superuser("root", "root@example.test", PASSWORD)
    html = signed_in(admin).get("/").content.decode()
    assert 'href="/admin/"' in html and "data-action" in html


def test_a_user_without_a_role_is_refused(make_user: Any) -> None:
    response = signed_in(make_user(None)).get("/")
    assert response.status_code == 403
    assert "no dashboard role" in response.content.decode()


def test_a_forged_action_post_by_a_viewer_is_refused_by_the_api(world: Any, make_user: Any) -> None:
    viewer = signed_in(make_user("viewer"), enforce_csrf_checks=True)
    token = page_token(viewer.get("/").content.decode())
    for url in (
        "/api/v1/regions/eu-west/drain",
        "/api/v1/regions/eu-west/drain?dry_run=1",
        "/api/v1/endpoints/euw-1/drain",
    ):
        response = viewer.post(url, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token)
        assert response.status_code == 403, url
        assert response.json()["error"] == "permission_denied"
    assert Region.objects.get(name="eu-west").admin_state == "active"
    assert Endpoint.objects.get(name="euw-1").admin_state == "active"


def test_an_operators_action_needs_the_pages_csrf_token(world: Any, make_user: Any) -> None:
    operator = signed_in(make_user("operator"), enforce_csrf_checks=True)
    token = page_token(operator.get("/").content.decode())
    url = "/api/v1/endpoints/euw-2/drain?dry_run=1"
    forged = operator.post(url, "{}", content_type="application/json")
    assert forged.status_code == 403
    planned = operator.post(url, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert planned.status_code == 200
    assert planned.json()["plan"]["change"] == {
        "action": "drain",
        "kind": "endpoint",
        "target": "euw-2",
    }
    applied = operator.post(
        url.split("?")[0], "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert applied.status_code == 200 and applied.json()["applied"] is True
    assert Endpoint.objects.get(name="euw-2").admin_state == "drained"


def test_signing_out_ends_the_session(make_user: Any) -> None:
    client = signed_in(make_user("viewer"))
    response = client.post("/logout/")
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert client.get("/").status_code == 302


def test_the_vendored_map_and_scripts_are_served_from_static(db: None) -> None:
    from django.contrib.staticfiles import finders

    for name in (
        "dashboard/vendor/world-110m.json",
        "dashboard/js/main.js",
        "dashboard/css/dashboard.css",
        "dashboard/vendor/LICENSES/world-atlas.LICENSE",
    ):
        assert finders.find(name), name
