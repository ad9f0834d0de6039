"""The gateway tests' world: the named world's shape, served on loopback by the simulator.

``eu-west`` (two H100-ish endpoints), ``eu-central`` (one), ``us-east`` (two) and a strict
GDPR rule for EU clients, with every endpoint on 127.0.0.1 (``simserver`` binds free ports,
then the fleet is rewritten with them). ``GatewayThread`` runs a gateway on a private event
loop in a daemon thread, so tests use blocking clients (the real ``openai`` library).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from tests.worlds import GATEWAY
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.gateway import GatewaySettings, RunningGateway, start_gateway
from trafficmgr.requestpath import (
    ClientIdentity,
    RequestPath,
    RequestPathConfig,
    StaticSource,
)
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.types import ClientLocation, Fleet

T = TypeVar("T")
TOKEN = "sk-test-client"
EU_IP = "5.9.0.1"  # DE in the bundled GeoLite2 database
US_IP = "8.8.8.8"
EU_REGIONS = ("eu-west", "eu-central")

WORLD = GATEWAY

LOCATIONS = {EU_IP: country_location("DE"), US_IP: country_location("US")}


def world_fleet() -> Fleet:
    return load_fleet_text(WORLD)


def locate(ip: str) -> ClientLocation:
    """Locate the test addresses without a database (loopback is unlocated)."""
    return LOCATIONS.get(ip, ClientLocation())


def make_core(fleet: Fleet, **config: Any) -> tuple[RequestPath, StaticSource]:
    source = StaticSource(fleet, {TOKEN: ClientIdentity("tests")}, locate=locate)
    return RequestPath(source, RequestPathConfig(**config), seed=7), source


def ledger_drained(core: RequestPath, timeout_s: float = 5.0) -> int:
    """Wait until no request is in flight in ``core``'s ledger; return what is left.

    The gateway closes a request's accounting just after its last byte went out, so a
    client can hold the whole answer a moment before the ledger is empty.
    """
    deadline = time.monotonic() + timeout_s
    while core.ledger.total and time.monotonic() < deadline:
        time.sleep(0.01)
    return core.ledger.total


class LoopThread:
    """An event loop in a daemon thread; ``call`` runs a coroutine on it and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class GatewayThread:
    """A gateway on its own event loop in a daemon thread."""

    def __init__(self, core: RequestPath, settings: GatewaySettings | None = None) -> None:
        self.core = core
        self.settings = settings or GatewaySettings(trusted_proxies=(), first_byte_timeout_s=5)
        self._thread: LoopThread | None = None
        self.gateway: RunningGateway | None = None

    def __enter__(self) -> GatewayThread:
        self._thread = LoopThread()
        self.gateway = self.call(start_gateway(self.core, self.settings))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gateway is not None:
            self.call(self.gateway.stop())
        if self._thread is not None:
            self._thread.close()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        assert self._thread is not None
        return self._thread.call(coro, timeout)

    @property
    def base_url(self) -> str:
        assert self.gateway is not None
        return self.gateway.base_url

    @property
    def origin(self) -> str:
        return self.base_url.removesuffix("/v1")
