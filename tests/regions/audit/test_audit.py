"""The audit trail of fleet apply: who, what, before and after; append-only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from regions.access.issue import create_token
from regions.audit.trail import acting_as
from regions.fleet.plan import UnsafePlan
from regions.models import AuditLog, Region

pytestmark = pytest.mark.django_db


def edited(world_yaml: str, **region0: Any) -> str:
    doc = yaml.safe_load(world_yaml)
    doc["regions"][0].update(region0)
    return yaml.safe_dump(doc, sort_keys=False)


def test_update_is_audited_with_before_and_after(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    start = AuditLog.objects.count()
    apply_yaml(edited(world_yaml, priority=3, addresses=["192.0.2.11"]))
    rows = list(AuditLog.objects.order_by("id"))[start:]
    assert [(r.action, r.object_type, r.object_repr) for r in rows] == [
        ("update", "Region", "eu-west"),
        ("apply", "Fleet", "infer.example.test"),
    ]
    update = rows[0]
    assert (update.actor, update.actor_type, update.source) == ("cli:tests", "cli", "cli")
    assert update.before["priority"] == 1 and update.after["priority"] == 3
    assert update.before["addresses"] == ["192.0.2.10", "2001:db8:10::1"]
    assert update.after["addresses"] == ["192.0.2.11"]
    summary = rows[1]
    assert summary.actor == "cli:tests"
    assert summary.after["changes"] == [
        {
            "action": "update",
            "type": "region",
            "name": "eu-west",
            "fields": {
                "addresses": [["192.0.2.10", "2001:db8:10::1"], ["192.0.2.11"]],
                "priority": [1, 3],
            },
        }
    ]


def test_deletes_are_audited_with_the_old_row(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    doc = yaml.safe_load(world_yaml)
    doc["regions"][1]["endpoints"].pop()  # use-2
    apply_yaml(yaml.safe_dump(doc))
    row = AuditLog.objects.get(action="delete", object_type="Endpoint")
    assert row.object_repr == "use-2" and row.after is None
    assert row.before["address"] == "10.3.0.12:8000" and row.actor == "cli:tests"


def test_residency_regions_change_is_audited(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    doc = yaml.safe_load(world_yaml)
    doc["residency"][0]["regions"] = ["ap-south", "eu-west"]
    apply_yaml(yaml.safe_dump(doc))
    row = AuditLog.objects.filter(object_type="ResidencyRule").first()
    assert row is not None and row.after == {"regions": {"add": ["eu-west"]}}


def test_no_op_and_refused_applies_leave_no_rows(
    world: Any, world_yaml: str, apply_yaml: Callable[..., Any]
) -> None:
    count = AuditLog.objects.count()
    apply_yaml(world_yaml)
    doc = yaml.safe_load(world_yaml)
    doc["regions"] = doc["regions"][:1]
    doc["residency"] = []
    with pytest.raises(UnsafePlan):
        apply_yaml(yaml.safe_dump(doc))
    assert AuditLog.objects.count() == count


def test_writes_outside_a_named_actor_are_attributed_to_system(world: Any) -> None:
    Region.objects.get(name="eu-west").save()  # no change: no row
    region = Region.objects.get(name="ap-south")
    region.priority = 9
    region.save()
    row = AuditLog.objects.first()
    assert row is not None and (row.actor, row.actor_type) == ("system", "system")


def test_token_creation_never_records_the_secret_or_hash(db: None) -> None:
    with acting_as("cli:alice"):
        token, secret = create_token("ci", "admin", created_by="cli:alice")
    row = AuditLog.objects.get(object_type="ApiToken")
    assert row.actor == "cli:alice" and row.action == "create"
    assert "key_hash" not in row.after
    assert secret not in str(row.after) and token.key_hash not in str(row.after)


def test_audit_log_is_append_only(world: Any) -> None:
    row = AuditLog.objects.first()
    assert row is not None
    row.actor = "mallory"
    with pytest.raises(PermissionError):
        row.save()
    with pytest.raises(PermissionError):
        row.delete()
    with pytest.raises(PermissionError):
        AuditLog.objects.all().update(actor="mallory")
    with pytest.raises(PermissionError):
        AuditLog.objects.all().delete()
