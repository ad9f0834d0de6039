"""Where the OpenAPI document and the server disagreed, they now say the same thing.

Found by schemathesis (tests/regions/api/test_schema_fuzz.py runs it over the whole API):
``limit=0`` allowed by the schema and refused by the server; the fleet export described as a
string while it returns a fleet document, and answering an undocumented 404 (in YAML) for an
unknown ``?format=``; operator actions described as taking any object (multipart included)
while they take no body at all, or one JSON field; ``dry_run`` read leniently (a typo
applied the change) while the schema calls it a boolean.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.regions.api.api_calls import API, assert_error

pytestmark = pytest.mark.django_db
EXPORT = f"{API}/fleet/export"


@pytest.fixture
def schema(anon_client: Any) -> dict[str, Any]:
    response = anon_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def parameters(schema: dict[str, Any], path: str, method: str = "get") -> dict[str, Any]:
    return {p["name"]: p for p in schema["paths"][path][method].get("parameters", [])}


def test_every_page_limit_is_described_as_the_server_takes_it(
    schema: dict[str, Any], world: Any, admin_client: Any
) -> None:
    paged = [
        path
        for path, item in schema["paths"].items()
        if "get" in item and "limit" in parameters(schema, path)
    ]
    assert len(paged) >= 9, paged
    for path in paged:
        limit = parameters(schema, path)["limit"]["schema"]
        offset = parameters(schema, path)["offset"]["schema"]
        assert limit["minimum"] == 1 and offset["minimum"] == 0, path
        if "{" in path:
            continue
        assert_error(admin_client.get(f"{path}?limit=0"), 400, "limit")
        assert admin_client.get(f"{path}?limit=1").status_code == 200, path
        big = admin_client.get(f"{path}?limit={limit['maximum']}")
        assert big.status_code == 200, path  # lowered to a page of 1,000, not refused
        assert_error(admin_client.get(f"{path}?offset={offset['maximum'] + 1}"), 400, "offset")


def test_the_export_is_described_as_the_fleet_document_it_is(
    schema: dict[str, Any], world: Any, viewer_client: Any
) -> None:
    operation = schema["paths"][EXPORT]["get"]
    described = operation["responses"]["200"]["content"]
    assert set(described) == {"text/yaml", "application/json"}
    as_yaml = yaml.safe_load(viewer_client.get(EXPORT).content)
    as_json = viewer_client.get(f"{EXPORT}?format=json").json()
    assert as_yaml == as_json
    for content in described.values():
        body = content["schema"]
        assert body["type"] == "object"
        assert set(body["required"]) <= set(as_json)
        assert set(body["properties"]) <= set(as_json) | {"clients"}
    assert set(parameters(schema, EXPORT)["format"]["schema"]["enum"]) == {"yaml", "json"}
    assert "400" in operation["responses"]


@pytest.mark.parametrize("query", ["?format=xml", "?format=", "?format=api", "?format=yaml%00"])
def test_an_unknown_export_format_is_a_400_in_json(
    world: Any, viewer_client: Any, query: str
) -> None:
    response = viewer_client.get(EXPORT + query)
    assert response["Content-Type"] == "application/json"
    assert_error(response, 400, "format")


def test_export_errors_are_json_whatever_was_asked_for(anon_client: Any) -> None:
    response = anon_client.get(EXPORT, HTTP_ACCEPT="text/yaml")
    assert response.status_code == 401 and response["Content-Type"] == "application/json"
    assert response.json()["error"] == "not_authenticated"


BODYLESS_ACTIONS = [
    f"{API}/regions/{{name}}/drain/",
    f"{API}/regions/{{name}}/undrain/",
    f"{API}/regions/{{name}}/pause-failover/",
    f"{API}/regions/{{name}}/resume-failover/",
    f"{API}/endpoints/{{name}}/drain/",
    f"{API}/endpoints/{{name}}/undrain/",
]
JSON_BODIES = [
    f"{API}/regions/{{name}}/weight/",
    f"{API}/route",
    f"{API}/route/completions",
    f"{API}/heartbeats/",
    f"{API}/drills/",
]


def test_bodies_are_described_as_the_server_reads_them(schema: dict[str, Any]) -> None:
    for path in BODYLESS_ACTIONS:
        operation = schema["paths"][path]["post"]
        assert "requestBody" not in operation, path
        assert {"dry_run", "force"} <= set(parameters(schema, path, "post")), path
    for path in JSON_BODIES:
        content = schema["paths"][path]["post"]["requestBody"]["content"]
        assert set(content) == {"application/json"}, (path, set(content))
    weight = schema["paths"][BODYLESS_ACTIONS[0].replace("drain", "weight")]["post"]
    body = weight["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"] == "#/components/schemas/RegionWeightRequest"
    described = schema["components"]["schemas"]["RegionWeightRequest"]
    assert described["required"] == ["weight"]
    assert (
        described["properties"]["weight"]["minimum"],
        described["properties"]["weight"]["maximum"],
    ) == (0, 1000)


@pytest.mark.parametrize("value", ["perhaps", "2", "dry"])
def test_a_mistyped_dry_run_is_refused_not_applied(
    world: Any, operator_client: Any, unchanged: Any, value: str
) -> None:
    with unchanged():
        response = operator_client.post(f"{API}/regions/eu-west/drain/?dry_run={value}")
    assert_error(response, 400, "dry_run")


def test_every_operation_documents_the_outage_answer(schema: dict[str, Any]) -> None:
    """A store outage is a 503 with Retry-After on every path (test_outage_errors.py)."""
    for path, item in schema["paths"].items():
        if not path.startswith(API):
            continue
        for method, operation in item.items():
            outage = operation["responses"].get("503")
            assert outage is not None, (method, path)
            assert "Retry-After" in outage["headers"], (method, path)
            assert outage["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
