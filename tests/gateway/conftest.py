"""Fixtures: the simulated world on loopback, a gateway over it, an OpenAI client."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.gateway.world import TOKEN, GatewayThread, make_core, world_fleet
from trafficmgr.gateway import GatewaySettings, networks
from trafficmgr.routing.types import Fleet
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerThread]:
    """Every endpoint of the world, simulated on loopback (fast: time scaled 50x)."""
    specs = fleet_specs(world_fleet(), base_port=0)
    with SimServerThread(specs, time_scale=50.0, options=ServeOptions(seed=3)) as servers:
        yield servers


@pytest.fixture
def fleet(sim: SimServerThread) -> Fleet:
    return with_addresses(world_fleet(), sim.servers.addresses())


@pytest.fixture
def gateway(fleet: Fleet) -> Iterator[GatewayThread]:
    """A gateway over the world; loopback is a trusted proxy (X-Forwarded-For is read)."""
    core, _ = make_core(fleet, consecutive_failures=3, base_ejection_s=0.5)
    settings = GatewaySettings(
        trusted_proxies=networks(["127.0.0.1"]), first_byte_timeout_s=3, idle_timeout_s=1.0
    )
    with GatewayThread(core, settings) as gw:
        yield gw


@pytest.fixture
def client(gateway: GatewayThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=TOKEN, max_retries=0, timeout=20)
