"""Fixtures: the gateway tests' world without sockets, and a core over it on a manual clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.gateway.world import TOKEN, locate, world_fleet
from trafficmgr.requestpath import (
    ClientIdentity,
    Plan,
    Refusal,
    RequestInfo,
    RequestPath,
    RequestPathConfig,
    StaticSource,
)
from trafficmgr.routing.types import Fleet


class ManualClock:
    """A monotonic clock the test moves."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fleet() -> Fleet:
    return world_fleet()


@pytest.fixture
def make_core(clock: ManualClock) -> Callable[..., tuple[RequestPath, StaticSource]]:
    """Build a core over a fleet (default: the world) with config overrides."""

    def make(fleet: Fleet | None = None, **config: Any) -> tuple[RequestPath, StaticSource]:
        source = StaticSource(fleet or world_fleet(), {TOKEN: ClientIdentity("t")}, locate=locate)
        core = RequestPath(source, RequestPathConfig(**config), seed=11, clock=clock)
        core.maintain()
        return core, source

    return make


def plan(result: Plan | Refusal) -> Plan:
    assert isinstance(result, Plan), result
    return result


def ask(model: str = "m1", **fields: Any) -> RequestInfo:
    return RequestInfo(model, **{"prompt": "hello there", "max_output_tokens": 16, **fields})
