"""Fixtures of the regions app's tests: applying fleet text and picturing stored state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def stored_state() -> dict[str, Any]:
    """Everything fleet apply may touch, as comparable values (plus row counts)."""
    from regions.fleet.plan import fleet_state
    from regions.fleet.services import fleet_snapshot
    from regions.models import AuditLog, Endpoint, Event, GpuProfile, Region, ResidencyRule

    return {
        "fleet": fleet_state(fleet_snapshot()),
        "counts": {
            m.__name__: m.objects.count()
            for m in (Region, Endpoint, GpuProfile, ResidencyRule, AuditLog, Event)
        },
    }


@pytest.fixture
def state() -> Callable[[], dict[str, Any]]:
    """Call to picture the stored state; compare before and after a refused input."""
    return stored_state


@pytest.fixture
def apply_yaml(db: None) -> Callable[..., Any]:
    """Plan and apply fleet text as the CLI user ``cli:tests``; returns the applied plan."""
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
    from trafficmgr.fleetfile import load_fleet_text

    def apply(text: str | bytes, force: bool = False) -> Any:
        with acting_as("cli:tests", "cli", "cli"):
            return apply_plan(plan_fleet(load_fleet_text(text)), force=force)

    return apply
