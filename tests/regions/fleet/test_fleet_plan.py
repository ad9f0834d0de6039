"""Fleet plan and apply: per-object changes, idempotence, export → apply round trip."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from regions.fleet.plan import Change, apply_plan, plan_fleet
from regions.fleet.services import fleet_snapshot
from regions.models import Endpoint, Event, FailoverPolicy, FleetSettings, Region, ResidencyRule
from trafficmgr.fleetfile import (
    FleetError,
    dump_fleet,
    fleet_from_dict,
    fleet_to_dict,
    load_fleet_text,
)
from trafficmgr.routing.types import AdminState

pytestmark = pytest.mark.django_db


def edited(world_yaml: str, edit: Callable[[dict[str, Any]], None]) -> str:
    doc = yaml.safe_load(world_yaml)
    edit(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def change(plan: Any, kind: str, name: str) -> Change:
    found = [c for c in plan.changes if c.type == kind and c.name == name]
    assert len(found) == 1, plan.render()
    return found[0]


def test_first_apply_creates_every_object(db: None, world_yaml: str) -> None:
    plan = plan_fleet(load_fleet_text(world_yaml))
    assert plan.counts() == {"create": 14, "update": 0, "delete": 0}
    assert {c.type for c in plan.changes} == {
        "fleet_settings",
        "gpu_profile",
        "region",
        "endpoint",
        "residency_rule",
        "failover_policy",
    }
    apply_plan(plan)
    assert sorted(Region.objects.values_list("name", flat=True)) == [
        "ap-south",
        "eu-west",
        "us-east",
    ]
    assert Endpoint.objects.count() == 5
    assert Region.objects.get(name="us-east").admin_state == "drained"
    rule = ResidencyRule.objects.get(name="india-local")
    assert rule.countries == ["IN"]
    assert [r.name for r in rule.regions.all()] == ["ap-south"]
    assert FailoverPolicy.objects.get(name="default").miss_threshold == 3
    assert FleetSettings.objects.get().zone == "infer.example.test"


def test_second_apply_is_a_no_op(world: Any, world_yaml: str) -> None:
    events = Event.objects.count()
    plan = plan_fleet(load_fleet_text(world_yaml))
    assert plan.empty
    assert plan.summary() == "no changes"
    assert "no changes" in plan.render()
    apply_plan(plan)
    assert Event.objects.count() == events


def test_snapshot_equals_the_applied_file(world: Any, world_yaml: str) -> None:
    desired = load_fleet_text(world_yaml)
    by_name = {r.name: r for r in desired.regions}
    for region in world.regions:
        assert region == by_name[region.name]
    assert world.failover == desired.failover
    assert world.clients == desired.clients
    assert world.gpu_profiles == desired.gpu_profiles


def test_export_then_apply_is_a_no_op(world: Any) -> None:
    text = dump_fleet(fleet_snapshot())
    assert plan_fleet(load_fleet_text(text)).empty
    assert plan_fleet(fleet_from_dict(fleet_to_dict(fleet_snapshot()))).empty


def test_examples_fleet_round_trips(db: None) -> None:
    desired = load_fleet_text(Path("examples/fleet.yaml").read_bytes())
    apply_plan(plan_fleet(desired))
    exported = dump_fleet(fleet_snapshot())
    assert plan_fleet(load_fleet_text(exported)).empty
    assert len(fleet_snapshot().endpoints()) == len(desired.endpoints())


def test_update_lists_only_changed_fields_old_and_new(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][0]["priority"] = 3
        doc["regions"][0]["endpoints"][1]["gpus"] = 6
        doc["regions"][0]["endpoints"][1]["state"] = "drained"
        doc["ttl"] = 30

    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    assert plan.counts() == {"create": 0, "update": 3, "delete": 0}
    assert change(plan, "region", "eu-west").fields == {"priority": (1, 3)}
    assert change(plan, "endpoint", "euw-2").fields == {
        "gpus": (4, 6),
        "state": ("active", "drained"),
    }
    assert change(plan, "fleet_settings", "fleet").fields == {"ttl": (10, 30)}
    text = plan.render()
    assert "~ region eu-west" in text and "priority: 1 -> 3" in text
    apply_plan(plan)
    euw2 = Endpoint.objects.get(name="euw-2")
    assert (euw2.gpus, euw2.admin_state) == (6, "drained")
    assert plan_fleet(load_fleet_text(edited(world_yaml, edit))).empty


def test_delete_and_create_and_move(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        moved = doc["regions"][1]["endpoints"].pop(1)  # use-2 moves to ap-south
        doc["regions"][2]["endpoints"].append(moved)
        doc["regions"][0]["endpoints"].append(
            {
                "name": "euw-3",
                "address": "10.1.0.13:8000",
                "gpu": "H100",
                "gpus": 8,
                "models": ["llama-3-8b"],
            }
        )
        del doc["gpu_profiles"]["L4"]
        moved["gpu"] = "A100"

    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    assert change(plan, "endpoint", "use-2").fields == {
        "region": ("us-east", "ap-south"),
        "gpu": ("L4", "A100"),
    }
    assert change(plan, "endpoint", "euw-3").action == "create"
    assert change(plan, "gpu_profile", "L4").action == "delete"
    apply_plan(plan)
    assert Endpoint.objects.get(name="use-2").region.name == "ap-south"
    assert not Endpoint.objects.filter(gpu__name="L4").exists()
    assert plan_fleet(load_fleet_text(edited(world_yaml, edit))).empty


def test_removing_a_region_deletes_its_endpoints_and_rule(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"] = [r for r in doc["regions"] if r["name"] != "ap-south"]
        doc["residency"] = []

    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    assert {(c.action, c.type, c.name) for c in plan.changes} == {
        ("delete", "region", "ap-south"),
        ("delete", "endpoint", "aps-1"),
        ("delete", "residency_rule", "india-local"),
    }
    apply_plan(plan)
    assert not Region.objects.filter(name="ap-south").exists()
    assert not ResidencyRule.objects.exists()


def test_residency_region_order_is_not_a_change(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["residency"][0]["regions"] = ["eu-west", "ap-south"]

    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    assert change(plan, "residency_rule", "india-local").fields == {
        "regions": (["ap-south"], ["ap-south", "eu-west"])
    }
    apply_plan(plan)

    def reverse(doc: dict[str, Any]) -> None:
        doc["residency"][0]["regions"] = ["ap-south", "eu-west"]

    assert plan_fleet(load_fleet_text(edited(world_yaml, reverse))).empty


def test_apply_emits_one_config_event(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][2]["priority"] = 5

    before = Event.objects.count()
    apply_plan(plan_fleet(load_fleet_text(edited(world_yaml, edit))))
    assert Event.objects.count() == before + 1
    event = Event.objects.first()
    assert event is not None and event.kind == "config"
    assert "0 to create, 1 to update, 0 to delete" in event.message
    assert event.data["objects"] == ["update region ap-south"]


def test_stale_plan_is_refused(world: Any, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][0]["weight"] = 2.0

    plan = plan_fleet(load_fleet_text(edited(world_yaml, edit)))
    Region.objects.filter(name="eu-west").update(weight=3.0)
    with pytest.raises(Exception, match="changed since this plan") as info:
        apply_plan(plan)
    assert getattr(info.value, "status_code", None) == 409
    assert Region.objects.get(name="eu-west").weight == 3.0


def test_snapshot_uses_a_bounded_number_of_queries(db: None) -> None:
    apply_plan(plan_fleet(load_fleet_text(Path("examples/fleet.yaml").read_bytes())))
    with CaptureQueriesContext(connection) as ctx:
        fleet = fleet_snapshot()
    assert len(fleet.endpoints()) == 14
    assert len(ctx.captured_queries) <= 8


def test_snapshot_maps_states(world: Any) -> None:
    assert world.region("us-east").admin_state is AdminState.DRAINED
    assert world.region("eu-west").continent == "EU"
    assert world.region("ap-south").continent == "AS"
    assert world.residency[0].regions == ("ap-south",)


def test_sql_and_html_looking_names_are_refused_by_path(db: None, world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][0]["endpoints"][0]["models"] = ["ok", "<script>alert(1)</script>"]
        doc["regions"][1]["name"] = "x'; DROP TABLE regions_region; --"

    with pytest.raises(FleetError) as info:
        load_fleet_text(edited(world_yaml, edit))
    fields = info.value.as_fields()
    assert "regions[0].endpoints[0].models[1]" in fields
    assert "regions[1].name" in fields


def test_odd_but_valid_strings_round_trip_unchanged(db: None, world_yaml: str) -> None:
    models = ["DROP.TABLE--x", "script_alert.1", "région-ü"]

    def edit(doc: dict[str, Any]) -> None:
        doc["zone"] = "select--from.example.test"
        doc["regions"][0]["endpoints"][0]["models"] = models

    apply_plan(plan_fleet(load_fleet_text(edited(world_yaml, edit))))
    assert Endpoint.objects.get(name="euw-1").model_names == models
    assert FleetSettings.objects.get().zone == "select--from.example.test"
    exported = dump_fleet(fleet_snapshot())
    assert fleet_snapshot().region("eu-west").endpoints[0].models == tuple(models)
    assert plan_fleet(load_fleet_text(exported)).empty
