"""Every test here gets a fresh in-process hot state and empty process-wide caches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def fresh_hot_state() -> Iterator[Any]:
    from regions import hotstate
    from regions.caches import reset_process_state

    store = hotstate.MemoryHotState()
    reset_process_state(store)
    yield store
    reset_process_state(None)
