"""Regions, GPU profiles and failover policies over the REST API: CRUD by name."""

from __future__ import annotations

from typing import Any

import pytest

from regions.models import FailoverPolicy, GpuProfile, Region
from tests.regions.api.api_calls import API, NEW_REGION, assert_error, send_json

pytestmark = pytest.mark.django_db


def test_list_regions_is_paginated_and_ordered_by_name(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/regions/").json()
    assert body["count"] == 3
    assert [r["name"] for r in body["results"]] == ["ap-south", "eu-west", "us-east"]
    page = viewer_client.get(f"{API}/regions/?limit=1&offset=1").json()
    assert [r["name"] for r in page["results"]] == ["eu-west"]
    assert page["next"] and page["previous"]


def test_retrieve_region_by_name(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/regions/eu-west/").json()
    assert body["name"] == "eu-west"
    assert body["country"] == "IE"
    assert body["continent"] == "EU"
    assert body["lat"] == pytest.approx(53.35)
    assert body["addresses"] == ["192.0.2.10", "2001:db8:10::1"]
    assert body["admin_state"] == "active"


def test_unknown_region_is_404_in_the_error_format(world: Any, viewer_client: Any) -> None:
    assert_error(viewer_client.get(f"{API}/regions/nowhere/"), 404)


def test_filter_by_admin_state(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/regions/?admin_state=drained").json()
    assert [r["name"] for r in body["results"]] == ["us-east"]


def test_filter_value_outside_the_choices_is_400(world: Any, viewer_client: Any) -> None:
    assert_error(viewer_client.get(f"{API}/regions/?admin_state=sleepy"), 400, "admin_state")


def test_unknown_query_parameter_is_400_naming_it(world: Any, viewer_client: Any) -> None:
    assert_error(viewer_client.get(f"{API}/regions/?regoin=eu-west"), 400, "regoin")


def test_ordering_by_priority_descending(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/regions/?ordering=-priority,name").json()
    assert [r["name"] for r in body["results"]] == ["ap-south", "eu-west", "us-east"]


def test_ordering_by_unknown_field_is_400(world: Any, viewer_client: Any) -> None:
    assert_error(viewer_client.get(f"{API}/regions/?ordering=secret"), 400, "ordering")


def test_search_by_name(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/regions/?search=east").json()
    assert [r["name"] for r in body["results"]] == ["us-east"]


def test_create_region(world: Any, admin_client: Any) -> None:
    response = send_json(admin_client, "POST", f"{API}/regions/", NEW_REGION)
    assert response.status_code == 201, response.json()
    assert response.json()["continent"] == "EU"
    region = Region.objects.get(name="eu-central")
    assert region.addresses == NEW_REGION["addresses"]
    assert region.admin_state == "active"


def test_patch_region_admin_state(world: Any, admin_client: Any) -> None:
    response = send_json(
        admin_client, "PATCH", f"{API}/regions/eu-west/", {"admin_state": "drained"}
    )
    assert response.status_code == 200, response.json()
    assert Region.objects.get(name="eu-west").admin_state == "drained"


def test_what_get_returns_can_be_put_back(world: Any, admin_client: Any) -> None:
    body = admin_client.get(f"{API}/regions/eu-west/").json()
    body["priority"] = 5
    response = send_json(admin_client, "PUT", f"{API}/regions/eu-west/", body)
    assert response.status_code == 200, response.json()
    assert Region.objects.get(name="eu-west").priority == 5


def test_put_runs_model_clean_like_the_admin(world: Any, admin_client: Any, unchanged: Any) -> None:
    body = admin_client.get(f"{API}/regions/eu-west/").json()
    body["weight"] = -1
    with unchanged():
        assert_error(send_json(admin_client, "PUT", f"{API}/regions/eu-west/", body), 400, "weight")


def test_delete_region_takes_its_endpoints(world: Any, admin_client: Any) -> None:
    assert admin_client.delete(f"{API}/regions/ap-south/").status_code == 204
    assert not Region.objects.filter(name="ap-south").exists()
    assert admin_client.get(f"{API}/endpoints/aps-1/").status_code == 404


def test_gpu_profiles_by_name(world: Any, admin_client: Any) -> None:
    body = admin_client.get(f"{API}/gpu-profiles/H100/").json()
    assert body == {
        "name": "H100",
        "prefill_tokens_per_s": 12000.0,
        "decode_tokens_per_s": 2400.0,
        "max_concurrency": 64,
    }
    new = {
        "name": "B200",
        "prefill_tokens_per_s": 30000,
        "decode_tokens_per_s": 6000,
        "max_concurrency": 128,
    }
    assert send_json(admin_client, "POST", f"{API}/gpu-profiles/", new).status_code == 201
    assert GpuProfile.objects.get(name="B200").max_concurrency == 128


def test_gpu_profile_in_use_cannot_be_deleted(
    world: Any, admin_client: Any, unchanged: Any
) -> None:
    with unchanged():
        body = assert_error(admin_client.delete(f"{API}/gpu-profiles/H100/"), 409)
    assert body["error"] == "in_use"
    assert "euw-1" in body["detail"]


def test_gpu_profile_rates_must_be_positive(world: Any, admin_client: Any, unchanged: Any) -> None:
    bad = {"name": "X1", "prefill_tokens_per_s": 0, "decode_tokens_per_s": 10, "max_concurrency": 1}
    with unchanged():
        assert_error(
            send_json(admin_client, "POST", f"{API}/gpu-profiles/", bad),
            400,
            "prefill_tokens_per_s",
        )


def test_failover_policy_read_and_update(world: Any, admin_client: Any) -> None:
    body = admin_client.get(f"{API}/failover-policies/default/").json()
    assert body["all_down"] == "fail_open"
    response = send_json(
        admin_client,
        "PATCH",
        f"{API}/failover-policies/default/",
        {"all_down": "fail_closed", "slow_start_s": 60},
    )
    assert response.status_code == 200, response.json()
    policy = FailoverPolicy.objects.get(name="default")
    assert (policy.all_down, policy.slow_start_s) == ("fail_closed", 60.0)


def test_failover_policy_cross_field_invariant(
    world: Any, admin_client: Any, unchanged: Any
) -> None:
    with unchanged():
        response = send_json(
            admin_client,
            "PATCH",
            f"{API}/failover-policies/default/",
            {"heartbeat_interval_s": 10, "hold_down_s": 2},
        )
        assert_error(response, 400, "hold_down_s")
