"""Fixtures of the simulated-server tests: the lab fleet served on ephemeral loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.simserver.lab import StartServers
from tests.worlds import SIM_LAB
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.types import Fleet
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs


@pytest.fixture
def fleet() -> Fleet:
    return load_fleet_text(SIM_LAB)


@pytest.fixture
def start_servers(fleet: Fleet) -> Iterator[StartServers]:
    """Start the fleet's endpoints in a thread (``time_scale``, options as keywords)."""
    started: list[SimServerThread] = []

    def start(time_scale: float = 50.0, **options: Any) -> SimServerThread:
        faults = options.pop("faults", None)
        runner = SimServerThread(
            fleet_specs(fleet, base_port=0),
            time_scale=time_scale,
            options=ServeOptions(**options),
            faults=faults,
        )
        runner.start()
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.stop()


@pytest.fixture
def servers(start_servers: StartServers) -> SimServerThread:
    """The fleet's endpoints at time scale 50 (fast: a T1 second takes 20 ms)."""
    return start_servers()
