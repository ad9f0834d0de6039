"""Fixtures for the simulator: the sim world (``world.py``) and synthetic steady traces."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.worlds import SIM as SIM_WORLD_YAML
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.types import Fleet
from trafficmgr.sim.traces import Trace, TraceRequest


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """The simulator writes nothing under VAR_DIR and needs no Django settings."""


@pytest.fixture
def sim_world() -> Fleet:
    return load_fleet_text(SIM_WORLD_YAML)


@pytest.fixture
def steady_trace() -> Callable[..., Trace]:
    """Build a trace of ``rate`` requests/s for ``seconds``, all of one size."""

    def build(
        rate: float = 10.0, seconds: float = 60.0, input_tokens: int = 1000, output_tokens: int = 50
    ) -> Trace:
        n = int(rate * seconds)
        reqs = tuple(TraceRequest(k / rate, input_tokens, output_tokens) for k in range(n))
        return Trace("<steady>", "azure", reqs)

    return build
