"""Endpoints over the REST API: region and GPU by name, models served, filters."""

from __future__ import annotations

from typing import Any

import pytest

from regions.models import Endpoint
from tests.regions.api.api_calls import API, NEW_ENDPOINT, assert_error, send_json

pytestmark = pytest.mark.django_db


def test_endpoint_names_its_region_gpu_and_models(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/endpoints/euw-1/").json()
    assert body["region"] == "eu-west"
    assert body["gpu"] == "H100"
    assert body["gpus"] == 8
    assert body["models"] == ["llama-3-70b", "llama-3-8b"]
    assert "model_names" not in body


def test_filter_by_region_and_admin_state(world: Any, admin_client: Any) -> None:
    body = admin_client.get(f"{API}/endpoints/?region=eu-west").json()
    assert [e["name"] for e in body["results"]] == ["euw-1", "euw-2"]
    send_json(admin_client, "PATCH", f"{API}/endpoints/euw-2/", {"admin_state": "drained"})
    body = admin_client.get(f"{API}/endpoints/?region=eu-west&admin_state=drained").json()
    assert [e["name"] for e in body["results"]] == ["euw-2"]


def test_repeated_filter_matches_any_value(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/endpoints/?region=eu-west&region=ap-south").json()
    assert [e["name"] for e in body["results"]] == ["aps-1", "euw-1", "euw-2"]


def test_filter_by_gpu_and_ordering(world: Any, viewer_client: Any) -> None:
    body = viewer_client.get(f"{API}/endpoints/?gpu=H100&ordering=-name").json()
    assert [e["name"] for e in body["results"]] == ["use-1", "euw-1"]


def test_create_endpoint(world: Any, admin_client: Any) -> None:
    response = send_json(admin_client, "POST", f"{API}/endpoints/", NEW_ENDPOINT)
    assert response.status_code == 201, response.json()
    assert response.json()["models"] == ["llama-3-8b"]
    endpoint = Endpoint.objects.select_related("region", "gpu").get(name="euw-3")
    assert (endpoint.region.name, endpoint.gpu.name, endpoint.gpus) == ("eu-west", "L4", 2)
    assert endpoint.model_names == ["llama-3-8b"]


@pytest.mark.parametrize(
    "address", ["10.1.0.13", "[2001:db8::13]:8000", "2001:db8::13", "gpu-13.example.test:8000"]
)
def test_endpoint_address_forms(world: Any, admin_client: Any, address: str) -> None:
    response = send_json(
        admin_client, "POST", f"{API}/endpoints/", NEW_ENDPOINT | {"address": address}
    )
    assert response.status_code == 201, response.json()
    assert Endpoint.objects.get(name="euw-3").address == address


def test_move_endpoint_to_another_region(world: Any, admin_client: Any) -> None:
    response = send_json(
        admin_client,
        "PATCH",
        f"{API}/endpoints/euw-2/",
        {"region": "us-east", "models": ["llama-3-8b", "mistral-7b"]},
    )
    assert response.status_code == 200, response.json()
    endpoint = Endpoint.objects.get(name="euw-2")
    assert endpoint.region.name == "us-east"
    assert endpoint.model_names == ["llama-3-8b", "mistral-7b"]


def test_unknown_region_is_named(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        body = assert_error(
            send_json(
                admin_client, "POST", f"{API}/endpoints/", NEW_ENDPOINT | {"region": "mars-1"}
            ),
            400,
            "region",
        )
    assert "mars-1" in body["fields"]["region"][0]


def test_empty_models_list_is_refused(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(
            send_json(admin_client, "POST", f"{API}/endpoints/", NEW_ENDPOINT | {"models": []}),
            400,
            "models",
        )


def test_model_names_are_constrained(world: Any, admin_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(
            send_json(
                admin_client, "POST", f"{API}/endpoints/", NEW_ENDPOINT | {"models": ["llama 3"]}
            ),
            400,
            "models",
        )


def test_delete_endpoint(world: Any, admin_client: Any) -> None:
    assert admin_client.delete(f"{API}/endpoints/euw-2/").status_code == 204
    assert not Endpoint.objects.filter(name="euw-2").exists()
