"""The worker's ticks keep the garbage collector's full walks out of the next tick."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from tests.regions.loop.conftest import ENDPOINTS

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0


@pytest.fixture
def thawed() -> Iterator[None]:
    from regions.loop import control as controlloop

    yield
    controlloop._heap = None
    gc.unfreeze()


def test_a_worker_tick_freezes_what_survived_it(feed: Any, thawed: None) -> None:
    from regions.loop.control import run_tick

    gc.unfreeze()
    feed(T0, ENDPOINTS)
    assert run_tick(T0, interval_s=1.0).ran
    assert gc.get_freeze_count() == 0  # only the worker asks for it
    run_tick(T0 + 1, interval_s=1.0, keep_heap=True)
    settled = gc.get_freeze_count()
    assert settled > 0
    feed(T0 + 2, ENDPOINTS)
    result = run_tick(T0 + 2, interval_s=1.0, keep_heap=True)
    assert result.ran and gc.get_freeze_count() >= settled
    assert gc.get_count()[0] < 100  # the young generation was collected after the tick
