"""The OpenAPI schema describes the configuration API truthfully; the docs need no CDN."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.staticfiles import finders
from drf_spectacular.validation import validate_schema

from tests.regions.api.api_calls import API

pytestmark = pytest.mark.django_db

CONFIG_PATHS = {
    "regions": "name",
    "endpoints": "name",
    "gpu-profiles": "name",
    "residency-rules": "name",
    "failover-policies": "name",
}
HISTORY_PATHS = {"events": "id", "audit": "id"}


@pytest.fixture
def schema(anon_client: Any) -> dict[str, Any]:
    response = anon_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def _ref(response: dict[str, Any]) -> str:
    return str(response["content"]["application/json"]["schema"]["$ref"])


def test_schema_is_valid_openapi_3(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    validate_schema(schema)


def test_every_configuration_path_is_described(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    for name, key in CONFIG_PATHS.items():
        assert set(paths[f"{API}/{name}/"]) == {"get", "post"}
        assert set(paths[f"{API}/{name}/{{{key}}}/"]) == {"get", "put", "patch", "delete"}
    for name, key in HISTORY_PATHS.items():
        assert set(paths[f"{API}/{name}/"]) == {"get"}
        assert set(paths[f"{API}/{name}/{{{key}}}/"]) == {"get"}
    assert set(paths[f"{API}/tokens/"]) == {"get", "post"}
    assert set(paths[f"{API}/tokens/{{token_id}}/"]) == {"get", "delete"}
    assert set(paths[f"{API}/tokens/{{token_id}}/revoke/"]) == {"post"}


def test_errors_use_the_error_component(schema: dict[str, Any]) -> None:
    error = schema["components"]["schemas"]["Error"]
    assert set(error["properties"]) == {"error", "detail", "fields"}
    assert set(error["required"]) == {"error", "detail", "fields"}
    for path, item in schema["paths"].items():
        if not path.startswith(API):
            continue
        for method, operation in item.items():
            responses = operation["responses"]
            public = {} in operation.get("security", [{}])
            for code in ("429",) if public else ("401", "403", "429"):
                assert _ref(responses[code]) == "#/components/schemas/Error", (path, method)
            assert "Retry-After" in responses["429"]["headers"]
            if method in {"post", "put", "patch"}:
                assert _ref(responses["400"]) == "#/components/schemas/Error", (path, method)
                assert "413" in responses


def test_bearer_scheme_is_declared(schema: dict[str, Any]) -> None:
    scheme = schema["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert {"bearerAuth": []} in schema["paths"][f"{API}/regions/"]["get"]["security"]


def test_filters_and_ordering_are_documented(schema: dict[str, Any]) -> None:
    params = {p["name"]: p for p in schema["paths"][f"{API}/endpoints/"]["get"]["parameters"]}
    assert {"region", "gpu", "admin_state", "ordering", "search", "limit", "offset"} <= set(params)
    assert params["admin_state"]["schema"]["enum"] == ["active", "drained", "disabled"]
    events = {p["name"] for p in schema["paths"][f"{API}/events/"]["get"]["parameters"]}
    assert {"region", "kind", "since", "until"} <= events


def test_token_creation_documents_the_one_time_secret(schema: dict[str, Any]) -> None:
    post = schema["paths"][f"{API}/tokens/"]["post"]
    created = _ref(post["responses"]["201"]).rsplit("/", 1)[-1]
    assert "secret" in schema["components"]["schemas"][created]["properties"]
    listed = schema["components"]["schemas"]["Token"]["properties"]
    assert "secret" not in listed and "key_hash" not in listed


@pytest.mark.parametrize(
    ("path", "component"),
    [
        ("regions/eu-west/", "Region"),
        ("endpoints/euw-1/", "Endpoint"),
        ("gpu-profiles/H100/", "GpuProfile"),
        ("residency-rules/india-local/", "ResidencyRule"),
        ("failover-policies/default/", "FailoverPolicy"),
    ],
)
def test_responses_match_their_described_shape(
    world: Any, viewer_client: Any, schema: dict[str, Any], path: str, component: str
) -> None:
    body = viewer_client.get(f"{API}/{path}").json()
    described = schema["components"]["schemas"][component]
    assert set(body) == set(described["properties"])
    request_fields = set(schema["components"]["schemas"][f"{component}Request"]["properties"])
    assert request_fields <= set(body)
    assert "id" not in request_fields and "created_at" not in request_fields


def test_docs_are_served_without_a_cdn(anon_client: Any) -> None:
    response = anon_client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    for cdn in ("cdn.jsdelivr", "unpkg.com", "cdnjs", "googleapis"):
        assert cdn not in html
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
