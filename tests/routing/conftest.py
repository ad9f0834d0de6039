"""The engine's view of the small named world, and builders for heartbeats and statuses.

The world (``world_yaml`` from tests/conftest.py): ``eu-west`` healthy, ``us-east``
draining (admin state drained), ``ap-south`` residency-locked (Indian clients may only go
there). ``gdpr_fleet`` adds ``eu-central`` (priority 2) and a strict GDPR rule, so EU
clients have somewhere to fail over to inside their jurisdiction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.types import (
    Endpoint,
    Fleet,
    GeoPoint,
    GpuSample,
    Heartbeat,
    ProbeSample,
    Region,
    RegionState,
    RegionStatus,
    ResidencyMode,
    ResidencyRule,
    ServerSample,
)

NOW = 1_000_000.0

EU_CENTRAL = Region(
    name="eu-central",
    country="DE",
    continent="EU",
    location=GeoPoint(50.11, 8.68),
    addresses=("192.0.2.20",),
    endpoints=(
        Endpoint("euc-1", "eu-central", "10.2.0.11:8000", "A100", 8, ("llama-3-70b", "llama-3-8b")),
    ),
    priority=2,
)
GDPR = ResidencyRule("gdpr", frozenset(), frozenset({"EU"}), ("eu-west", "eu-central"))


@pytest.fixture
def now() -> float:
    return NOW


@pytest.fixture
def fleet(world_yaml: str) -> Fleet:
    """The small named world as the engine sees it."""
    return load_fleet_text(world_yaml)


@pytest.fixture
def gdpr_fleet(fleet: Fleet) -> Fleet:
    """The world plus eu-central (priority 2) and a strict GDPR rule for EU clients."""
    return replace(fleet, regions=(*fleet.regions, EU_CENTRAL), residency=(*fleet.residency, GDPR))


def make_beat(endpoint: str, at: float, **changes: Any) -> Heartbeat:
    """Return a healthy heartbeat received at ``at``; keyword arguments override parts.

    ``gpus`` (count), ``server`` (ServerSample fields as a dict), ``probe_ok`` and
    ``gpu`` (GpuSample fields applied to every GPU) are understood.
    """
    count = changes.pop("gpus", 8)
    gpu_fields = changes.pop("gpu", {})
    server_fields = {"requests_running": 8, "kv_cache_usage": 0.3, **changes.pop("server", {})}
    probe_ok = changes.pop("probe_ok", True)
    gpus = tuple(
        GpuSample(
            index=i,
            uuid=f"GPU-{endpoint}-{i}",
            name="H100",
            util_pct=40.0,
            mem_used_mb=40_000,
            mem_total_mb=81_920,
            temp_c=55.0,
        )
        for i in range(count)
    )
    gpus = tuple(replace(g, **gpu_fields) for g in gpus)
    return Heartbeat(
        endpoint=endpoint,
        seq=1,
        sent_at=at,
        received_at=at,
        gpus=gpus,
        server=ServerSample(kind="vllm", **server_fields),
        probe=ProbeSample(ok=probe_ok, latency_ms=15.0),
        **changes,
    )


@pytest.fixture
def beat() -> Callable[..., Heartbeat]:
    """Build a heartbeat: ``beat("euw-1", now, probe_ok=False)``."""
    return make_beat


def all_beats(fleet: Fleet, at: float, **changes: Any) -> dict[str, Heartbeat]:
    """Return a healthy heartbeat for every endpoint of the fleet."""
    return {e.name: make_beat(e.name, at, gpus=e.gpus, **changes) for e in fleet.endpoints()}


@pytest.fixture
def beats() -> Callable[..., dict[str, Heartbeat]]:
    return all_beats


def make_status(state: RegionState, headroom: float = 0.6, **changes: Any) -> RegionStatus:
    """Return a region status with a large capacity; keyword arguments override fields."""
    fields: dict[str, Any] = {"capacity": 20_000.0, "reason": f"test: {state.value}"}
    fields.update(changes)
    return RegionStatus(state=state, headroom=headroom, **fields)


@pytest.fixture
def status() -> Callable[..., RegionStatus]:
    """Build a region status: ``status(RegionState.DOWN)``."""
    return make_status


def states(fleet: Fleet, default: RegionState, **by_region: RegionState) -> dict[str, RegionStatus]:
    """Return a status per region: ``default``, or the state named by region (``eu_west=...``)."""
    out = {}
    for region in fleet.regions:
        state = by_region.get(region.name.replace("-", "_"), default)
        out[region.name] = make_status(state, ramp=0.0 if state is RegionState.DOWN else 1.0)
    return out


@pytest.fixture
def statuses() -> Callable[..., dict[str, RegionStatus]]:
    """Build statuses for every region: ``statuses(fleet, HEALTHY, eu_west=DOWN)``."""
    return states


__all__ = ["GDPR", "NOW", "ResidencyMode"]
