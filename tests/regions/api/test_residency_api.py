"""Residency rules over the REST API: regions named by name, client sets never empty."""

from __future__ import annotations

from typing import Any

import pytest

from regions.models import ResidencyRule
from tests.regions.api.api_calls import API, assert_error, send_json

pytestmark = pytest.mark.django_db

GDPR = {"name": "gdpr", "continents": ["EU"], "regions": ["eu-west"], "mode": "strict"}


def _regions(name: str) -> list[str]:
    return sorted(ResidencyRule.objects.get(name=name).regions.values_list("name", flat=True))


def test_rule_lists_its_regions_by_name(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/residency-rules/india-local/").json()
    assert body["countries"] == ["IN"]
    assert body["continents"] == []
    assert body["regions"] == ["ap-south"]
    assert body["mode"] == "strict"


def test_create_rule(world: Any, admin_client: Any) -> None:
    response = send_json(admin_client, "POST", f"{API}/residency-rules/", GDPR)
    assert response.status_code == 201, response.json()
    assert response.json()["regions"] == ["eu-west"]
    assert _regions("gdpr") == ["eu-west"]


def test_update_replaces_the_region_set(world: Any, admin_client: Any) -> None:
    response = send_json(
        admin_client,
        "PATCH",
        f"{API}/residency-rules/india-local/",
        {"regions": ["ap-south", "eu-west"], "mode": "preferred"},
    )
    assert response.status_code == 200, response.json()
    assert _regions("india-local") == ["ap-south", "eu-west"]
    assert ResidencyRule.objects.get(name="india-local").mode == "preferred"


def test_filter_rules_by_region(world: Any, admin_client: Any) -> None:
    send_json(admin_client, "POST", f"{API}/residency-rules/", GDPR)
    body = admin_client.get(f"{API}/residency-rules/?region=ap-south").json()
    assert [r["name"] for r in body["results"]] == ["india-local"]


def test_unknown_region_is_named(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        body = assert_error(
            send_json(
                admin_client,
                "POST",
                f"{API}/residency-rules/",
                GDPR | {"regions": ["eu-west", "atlantis"]},
            ),
            400,
            "regions",
        )
    assert "atlantis" in body["fields"]["regions"][0]
    assert "eu-west" not in body["fields"]["regions"][0]


def test_update_with_unknown_region_keeps_the_old_set(
    world: Any, admin_client: Any, unchanged: Any
) -> None:
    with unchanged():
        assert_error(
            send_json(
                admin_client,
                "PATCH",
                f"{API}/residency-rules/india-local/",
                {"regions": ["atlantis"]},
            ),
            400,
            "regions",
        )


@pytest.mark.parametrize("clients", [{}, {"countries": [], "continents": []}])
def test_empty_client_sets_are_refused(
    world: Any, admin_client: Any, unchanged: Any, clients: dict[str, Any]
) -> None:
    body = {"name": "nobody", "regions": ["eu-west"], **clients}
    with unchanged():
        assert_error(
            send_json(admin_client, "POST", f"{API}/residency-rules/", body), 400, "countries"
        )


def test_empty_region_set_is_refused(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(
            send_json(admin_client, "POST", f"{API}/residency-rules/", GDPR | {"regions": []}),
            400,
            "regions",
        )


@pytest.mark.parametrize(
    ("field", "value"), [("countries", ["XX"]), ("continents", ["EUR"]), ("continents", ["XY"])]
)
def test_unknown_client_codes_are_named(
    world: Any, admin_client: Any, unchanged: Any, field: str, value: list[str]
) -> None:
    body = {"name": "odd", "regions": ["eu-west"], field: value}
    with unchanged():
        assert_error(send_json(admin_client, "POST", f"{API}/residency-rules/", body), 400, field)


def test_mode_must_be_a_known_choice(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(
            send_json(admin_client, "POST", f"{API}/residency-rules/", GDPR | {"mode": "lenient"}),
            400,
            "mode",
        )


def test_codes_are_upper_cased_like_the_fleet_file(world: Any, admin_client: Any) -> None:
    body = {
        "name": "mixed",
        "regions": ["eu-west"],
        "countries": ["ie", "IE", "de"],
        "continents": ["eu"],
    }
    response = send_json(admin_client, "POST", f"{API}/residency-rules/", body)
    assert response.status_code == 201, response.json()
    rule = ResidencyRule.objects.get(name="mixed")
    assert (rule.countries, rule.continents) == (["IE", "DE"], ["EU"])
