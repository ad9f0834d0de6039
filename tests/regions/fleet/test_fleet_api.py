"""POST /api/v1/fleet/apply and GET /api/v1/fleet/export: roles, plans, errors, round trip."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from regions.fleet.services import fleet_snapshot
from regions.models import AuditLog, Endpoint
from trafficmgr.fleetfile import dump_fleet, fleet_to_dict

pytestmark = pytest.mark.django_db

APPLY = "/api/v1/fleet/apply"
EXPORT = "/api/v1/fleet/export"


def post_yaml(
    client: Any, text: str | bytes, query: str = "", content_type: str = "application/yaml"
) -> Any:
    return client.post(APPLY + query, data=text, content_type=content_type)


def with_ttl(world_yaml: str, ttl: int) -> str:
    return world_yaml.replace("ttl: 10", f"ttl: {ttl}")


def test_operator_may_dry_run(
    world: Any, world_yaml: str, operator_client: Any, state: Callable[[], dict[str, Any]]
) -> None:
    before = state()
    response = post_yaml(operator_client, with_ttl(world_yaml, 60), "?dry_run=1")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["applied"] is False
    assert body["summary"] == "0 to create, 1 to update, 0 to delete"
    assert body["changes"] == [
        {"action": "update", "type": "fleet_settings", "name": "fleet", "fields": {"ttl": [10, 60]}}
    ]
    assert body["safety"]["unsafe"] == []
    assert state() == before


@pytest.mark.parametrize("role", ["viewer", "operator", "agent"])
def test_applying_needs_admin(
    role: str,
    world: Any,
    world_yaml: str,
    make_client: Callable[..., Any],
    state: Callable[[], dict[str, Any]],
) -> None:
    client = make_client(role, region="eu-west" if role == "agent" else None)
    before = state()
    response = post_yaml(client, with_ttl(world_yaml, 60))
    assert response.status_code == 403
    assert response.json()["error"] == "permission_denied"
    assert state() == before


def test_viewer_may_not_even_dry_run(world: Any, world_yaml: str, viewer_client: Any) -> None:
    assert post_yaml(viewer_client, world_yaml, "?dry_run=1").status_code == 403


def test_anonymous_is_401(world: Any, world_yaml: str, anon_client: Any) -> None:
    assert post_yaml(anon_client, world_yaml).status_code == 401
    assert anon_client.get(EXPORT).status_code == 401


def test_admin_applies_then_second_apply_is_a_no_op(
    world: Any, world_yaml: str, admin_client: Any
) -> None:
    first = post_yaml(admin_client, with_ttl(world_yaml, 60))
    assert first.status_code == 200, first.content
    assert first.json()["applied"] is True
    assert fleet_snapshot().ttl == 60
    audit = AuditLog.objects.filter(action="apply").first()
    assert audit is not None and audit.actor == "token:test-admin"
    second = post_yaml(admin_client, with_ttl(world_yaml, 60))
    assert second.json() | {"safety": None} == {
        "changes": [],
        "summary": "no changes",
        "applied": False,
        "safety": None,
        "counts": {"create": 0, "update": 0, "delete": 0},
    }


@pytest.mark.parametrize(
    "content_type", ["text/plain", "text/plain; charset=utf-8", "application/x-yaml", "text/yaml"]
)
def test_yaml_content_types(
    content_type: str, world: Any, world_yaml: str, admin_client: Any
) -> None:
    response = post_yaml(admin_client, world_yaml, "?dry_run=1", content_type)
    assert response.status_code == 200
    assert response.json()["changes"] == []


def test_json_wrapped_yaml(world: Any, world_yaml: str, admin_client: Any) -> None:
    response = admin_client.post(APPLY, {"fleet": with_ttl(world_yaml, 30)}, format="json")
    assert response.status_code == 200
    assert fleet_snapshot().ttl == 30


def test_json_without_fleet_is_400(world: Any, admin_client: Any) -> None:
    response = admin_client.post(APPLY, {"zone": "x"}, format="json")
    assert response.status_code == 400
    assert "fleet" in response.json()["fields"]


def test_other_media_types_are_415(world: Any, world_yaml: str, admin_client: Any) -> None:
    response = post_yaml(admin_client, world_yaml, content_type="application/xml")
    assert response.status_code == 415


def test_invalid_fleet_is_400_keyed_by_path(
    world: Any, world_yaml: str, admin_client: Any, state: Callable[[], dict[str, Any]]
) -> None:
    before = state()
    text = world_yaml.replace("gpu: A100, gpus: 4", "gpu: H200, gpus: 4")
    response = post_yaml(admin_client, text)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_fleet"
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "H200" in s)
    assert body["fields"] == {
        "regions[0].endpoints[1].gpu": [f"unknown GPU profile 'H200' (line {line})"]
    }
    assert state() == before


def test_non_utf8_and_syntax_errors_are_400(
    world: Any, admin_client: Any, state: Callable[[], dict[str, Any]]
) -> None:
    before = state()
    assert post_yaml(admin_client, b"zone: \xff\n").json()["fields"] == {
        "fleet": ["not UTF-8 text (byte 6)"]
    }
    response = post_yaml(admin_client, "zone: [a\nregions: []\n")
    assert response.status_code == 400
    assert "YAML syntax error" in response.json()["detail"]
    assert state() == before


def test_unsafe_plan_is_409_and_force_is_admin_only(
    world: Any,
    world_yaml: str,
    admin_client: Any,
    operator_client: Any,
    state: Callable[[], dict[str, Any]],
) -> None:
    doc = yaml.safe_load(world_yaml)
    doc["regions"][0]["endpoints"] = []
    text = yaml.safe_dump(doc)
    before = state()
    refused = post_yaml(admin_client, text)
    assert refused.status_code == 409
    body = refused.json()
    assert body["error"] == "unsafe_plan"
    assert "deletes 2 of 5 endpoints (40%, limit 30%)" in body["detail"]
    assert body["safety"]["endpoints_deleted"] == 2
    assert post_yaml(operator_client, text, "?dry_run=1&force=1").status_code == 403
    dry = post_yaml(operator_client, text, "?dry_run=1")
    assert dry.status_code == 200 and len(dry.json()["safety"]["unsafe"]) == 2
    assert state() == before
    forced = post_yaml(admin_client, text, "?force=1")
    assert forced.status_code == 200 and forced.json()["applied"] is True
    assert not Endpoint.objects.filter(region__name="eu-west").exists()


def test_bad_flag_value_is_400(world: Any, world_yaml: str, admin_client: Any) -> None:
    response = post_yaml(admin_client, world_yaml, "?dry_run=perhaps")
    assert response.status_code == 400
    assert "dry_run" in response.json()["fields"]


def test_export_yaml_matches_the_command(world: Any, viewer_client: Any) -> None:
    response = viewer_client.get(EXPORT)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/yaml")
    assert response.content.decode() == dump_fleet(fleet_snapshot())


def test_export_json(world: Any, viewer_client: Any) -> None:
    response = viewer_client.get(EXPORT + "?format=json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == json.loads(json.dumps(fleet_to_dict(fleet_snapshot())))


def test_export_then_apply_is_a_no_op_over_http(world: Any, admin_client: Any) -> None:
    exported = admin_client.get(EXPORT).content
    response = post_yaml(admin_client, exported)
    assert response.status_code == 200
    assert response.json()["changes"] == [] and response.json()["applied"] is False


def test_agent_may_not_export(world: Any, agent_client: Any) -> None:
    assert agent_client.get(EXPORT).status_code == 403


def test_schema_describes_fleet_endpoints(db: None, viewer_client: Any) -> None:
    response = viewer_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    apply_op = paths["/api/v1/fleet/apply"]["post"]
    assert set(apply_op["requestBody"]["content"]) >= {
        "application/yaml",
        "text/plain",
        "application/json",
    }
    assert {p["name"] for p in apply_op["parameters"]} >= {"dry_run", "force"}
    assert {"200", "400", "403", "409"} <= set(apply_op["responses"])
    export_op = paths["/api/v1/fleet/export"]["get"]
    assert set(export_op["responses"]["200"]["content"]) == {"text/yaml", "application/json"}
