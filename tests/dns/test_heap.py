"""The serving process keeps full garbage collections short: it freezes what has settled.

Each check builds objects and reference cycles, runs the keeper, and looks at what the
collector still walks (``gc.get_objects`` lists every generation but the frozen one) and at
which cycles were collected (a weak reference dies with its object).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import weakref
from collections.abc import Iterator

import pytest

from tests.dns.world import quiet_config
from trafficmgr.dns.server import DnsServer, _serve_until_signal
from trafficmgr.routing.types import Fleet
from trafficmgr.runtime.heap import HeapKeeper


class Node:
    """A container the collector tracks, to build cycles from."""

    def __init__(self) -> None:
        self.other: object = None


def cycle() -> weakref.ref[Node]:
    """Make an unreachable reference cycle; return a weak reference to one of its nodes."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def walked(obj: object) -> bool:
    """Tell whether a collection would walk ``obj`` (it is tracked and not frozen)."""
    return any(o is obj for o in gc.get_objects())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Leave the collector as the other tests expect it: nothing frozen, automatic on."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_collects_garbage_then_freezes_what_lives() -> None:
    live = Node()
    dead = cycle()
    HeapKeeper().settle()
    assert dead() is None
    assert gc.get_freeze_count() > 0
    assert not walked(live)


def test_a_tick_collects_new_garbage_and_freezes_new_survivors() -> None:
    clock = Clock()
    keeper = HeapKeeper(full_every_s=100.0, clock=clock)
    keeper.settle()
    frozen = gc.get_freeze_count()
    cache = {"warm": Node()}  # what the caches hold after warming up
    dead = cycle()
    assert walked(cache["warm"])
    clock.now = 10.0
    keeper.tick()
    assert dead() is None
    assert not walked(cache["warm"])
    assert gc.get_freeze_count() > frozen


def test_a_cycle_dropped_after_freezing_waits_for_the_full_collection() -> None:
    clock = Clock()
    keeper = HeapKeeper(full_every_s=100.0, clock=clock)
    a, b = Node(), Node()
    a.other, b.other = b, a
    keeper.settle()
    dropped = weakref.ref(a)
    del a, b
    clock.now = 50.0
    keeper.tick()  # frozen objects are not looked at: the cycle stays
    assert dropped() is not None
    clock.now = 100.0
    keeper.tick()
    assert dropped() is None
    assert keeper.full_collections == 2
    assert gc.get_freeze_count() > 0  # and what lives is frozen again


def test_the_serving_process_freezes_its_heap_once_started(fleet: Fleet) -> None:
    seen: list[int] = []

    def ready(server: DnsServer) -> None:
        seen.append(gc.get_freeze_count())
        os.kill(os.getpid(), signal.SIGTERM)  # handled by the server: stop serving

    server = DnsServer(fleet, quiet_config(), geoip=False)
    asyncio.run(_serve_until_signal(server, ready))
    assert seen and seen[0] > 0
