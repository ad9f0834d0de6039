"""``POST fleet/apply`` as a thin view over parse, check, plan-and-apply and answer."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from regions.api.fleet import service
from regions.api.fleet.views import FleetApplyView
from regions.audit.trail import acting_as
from regions.fleet.services import fleet_snapshot

pytestmark = pytest.mark.django_db

APPLY = "/api/v1/fleet/apply"


def with_ttl(world_yaml: str, ttl: int) -> str:
    return world_yaml.replace("ttl: 10", f"ttl: {ttl}")


def test_a_dry_run_plans_and_writes_nothing(
    world: Any, world_yaml: str, state: Callable[[], dict[str, Any]]
) -> None:
    before = state()
    ask = service.ApplyRequest(with_ttl(world_yaml, 60), dry_run=True, force=False)
    plan = service.plan_and_apply(ask)
    assert plan.summary() == "0 to create, 1 to update, 0 to delete"
    assert service.plan_body(plan, ask)["applied"] is False
    assert state() == before


def test_an_apply_writes_the_plan(world: Any, world_yaml: str) -> None:
    ask = service.ApplyRequest(with_ttl(world_yaml, 60), dry_run=False, force=False)
    with acting_as("test", "cli", "cli"):
        plan = service.plan_and_apply(ask)
    assert service.plan_body(plan, ask)["applied"] is True
    assert fleet_snapshot().ttl == 60


def test_a_long_flag_is_refused_naming_it_without_echoing_it_all(
    world: Any, world_yaml: str, operator_client: Any
) -> None:
    response = operator_client.post(
        APPLY + "?dry_run=" + "x" * 5000, data=world_yaml, content_type="application/yaml"
    )
    assert response.status_code == 400
    message = response.json()["fields"]["dry_run"][0]
    assert "not a boolean" in message
    assert len(message) < 100


def test_the_apply_view_only_calls_the_steps() -> None:
    source = textwrap.dedent(inspect.getsource(FleetApplyView.post))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.FunctionDef)
    assert len(body.body) <= 5
    for name in ("parse_apply", "check_may_apply", "plan_and_apply", "plan_body"):
        assert f"service.{name}(" in source
