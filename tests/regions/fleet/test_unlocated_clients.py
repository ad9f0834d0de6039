"""``unlocated_clients`` through the control plane: fleet file, store, snapshot, export, admin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from regions.fleet.plan import plan_fleet
from regions.fleet.services import fleet_snapshot
from regions.models import FleetSettings
from trafficmgr.fleetfile import FleetError, dump_fleet, load_fleet_text
from trafficmgr.routing.types import UnlocatedClients, UnlocatedKind


def with_unlocated(world_yaml: str, value: object) -> str:
    doc = yaml.safe_load(world_yaml)
    doc["unlocated_clients"] = value
    return yaml.safe_dump(doc, sort_keys=False)


def test_a_fleet_without_the_key_keeps_unlocated_clients_unrestricted(world_yaml: str) -> None:
    fleet = load_fleet_text(world_yaml)
    assert fleet.unlocated == UnlocatedClients()
    assert "unlocated_clients" not in dump_fleet(fleet)


@pytest.mark.parametrize("value", ["deny", "rule:india-local", "zone:EU"])
def test_the_file_reads_and_writes_each_form(world_yaml: str, value: str) -> None:
    fleet = load_fleet_text(with_unlocated(world_yaml, value))
    assert str(fleet.unlocated) == value
    assert load_fleet_text(dump_fleet(fleet)) == fleet


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("allow", "is not one of unrestricted, deny, rule:NAME or zone:CODE"),
        ("rule:nope", "no residency rule is named 'nope'"),
        ("zone:QQ", "'QQ' is no ISO 3166-1 alpha-2 country or continent code"),
        (["deny"], "expected a string"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_path(
    world_yaml: str, value: object, message: str
) -> None:
    with pytest.raises(FleetError) as caught:
        load_fleet_text(with_unlocated(world_yaml, value))
    (issue,) = caught.value.issues
    assert issue.path == "unlocated_clients" and message in issue.message
    assert issue.line is not None


@pytest.mark.django_db
def test_apply_stores_it_and_export_round_trips(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    assert fleet_snapshot().unlocated == UnlocatedClients()
    text = with_unlocated(world_yaml, "rule:india-local")
    plan = apply_yaml(text)
    assert [c.type for c in plan.changes] == ["fleet_settings"]
    assert FleetSettings.objects.get().unlocated_clients == "rule:india-local"
    stored = fleet_snapshot()
    assert stored.unlocated == UnlocatedClients(UnlocatedKind.RULE, "india-local")
    exported = dump_fleet(stored)
    assert "unlocated_clients: rule:india-local" in exported
    assert plan_fleet(load_fleet_text(exported)).empty
    assert plan_fleet(load_fleet_text(text)).empty


@pytest.mark.django_db
def test_a_stored_value_the_engine_cannot_read_denies(world: Any) -> None:
    FleetSettings.objects.filter(pk=1).update(unlocated_clients="garbage")
    assert fleet_snapshot().unlocated.kind is UnlocatedKind.DENY


@pytest.mark.django_db
def test_the_admin_refuses_a_bad_value_naming_the_field(world: Any) -> None:
    from django.core.exceptions import ValidationError

    settings = FleetSettings.current()
    settings.unlocated_clients = "zone:QQ"
    with pytest.raises(ValidationError) as caught:
        settings.full_clean()
    assert "unlocated_clients" in caught.value.message_dict
