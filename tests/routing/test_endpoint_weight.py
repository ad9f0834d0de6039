"""An endpoint of weight 0 gets no picks, from any strategy, however idle it is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trafficmgr.routing.picker import STRATEGIES, EndpointLoad, make_picker
from trafficmgr.routing.types import ClientLocation, Endpoint, GpuProfile, Request

H100 = GpuProfile("H100", 12000, 2400, 64)
REQUEST = Request("llama", ClientLocation("IE", "EU"), 1800, 256)


def load(name: str, weight: float, running: int) -> EndpointLoad:
    endpoint = Endpoint(name, "eu-west", f"{name}:8000", "H100", 8, ("llama",), weight)
    return EndpointLoad(endpoint, H100, running=running)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_weight_zero_gets_no_picks(strategy: str) -> None:
    loads = (load("idle-but-off", 0.0, 0), load("busy", 1.0, 400), load("also", 0.5, 300))
    picker = make_picker(strategy)
    picked = {picker.pick(REQUEST, loads, 0.0).endpoint for _ in range(60)}
    assert picked and "idle-but-off" not in picked


def test_weight_zero_everywhere_is_a_refusal_that_says_why() -> None:
    pick = make_picker("ai_aware").pick(REQUEST, (load("a", 0.0, 0),), 0.0)
    assert pick.endpoint is None and "weight above 0" in pick.reason


def test_weight_zero_among_many_candidates() -> None:
    """Above the exact limit the picker groups candidates by model: weight counts there too."""
    loads = tuple(load(f"e{i}", 1.0, 400) for i in range(40))
    loads = (*loads, replace(load("off", 0.0, 0)))
    picker = make_picker("ai_aware")
    assert all(picker.pick(REQUEST, loads, 0.0).endpoint != "off" for _ in range(200))
