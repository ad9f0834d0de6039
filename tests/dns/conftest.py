"""Fixtures of the DNS tests (the world they live in is described in ``world.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.dns.world import CITY_DB, FLEET_FILE, need_geoip, quiet_config
from trafficmgr.dns.config import ServerConfig
from trafficmgr.dns.server import DnsServer
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.geoip import Locator
from trafficmgr.routing.types import Fleet, UnlocatedClients


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """Shadow the root conftest's Django-settings fixture: DNS tests run without Django."""


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    """The demo fleet, with unlocated clients unrestricted: most queries here come from loopback
    without ECS, which cannot be located (the shipped file denies them: NODATA, tested apart)."""
    return replace(load_fleet_file(str(FLEET_FILE)), unlocated=UnlocatedClients())


@pytest.fixture(scope="session")
def denying_fleet() -> Fleet:
    """The demo fleet as shipped: clients that cannot be located are denied."""
    return load_fleet_file(str(FLEET_FILE))


@pytest.fixture(scope="session")
def locator() -> Iterator[Locator]:
    need_geoip()
    with Locator(str(CITY_DB)) as loc:
        yield loc


@pytest.fixture
def make_server(fleet: Fleet, locator: Locator) -> Iterator[Callable[..., DnsServer]]:
    """Return a factory of servers (not listening) over the demo fleet and the City test DB."""
    made: list[DnsServer] = []

    def factory(
        config: ServerConfig | None = None, fleet_: Fleet | None = None, **kw: Any
    ) -> DnsServer:
        server = DnsServer(fleet_ or fleet, config or quiet_config(), locator=locator, **kw)
        made.append(server)
        return server

    yield factory
    for server in made:
        server.store.close()


@pytest.fixture
def server(make_server: Callable[..., DnsServer]) -> DnsServer:
    return make_server()
