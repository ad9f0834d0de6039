"""The loop's hold over the control plane's own impairment ends after a cap.

A web process that keeps failing to take heartbeats (or spells that keep following each
other within the grace) used to hold the loop for as long as they lasted: a region whose
agents really went silent meanwhile was never taken down. Now, once the loop has held for
``LOOP_HOLD_MAX_S`` without a break, it acts on what it sees again.
"""

from __future__ import annotations

from typing import Any

import pytest

from trafficmgr.routing.types import FailoverPolicy

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0
NOT_US = ("euw-1", "euw-2", "euc-1", "aps-1")
POLICY = FailoverPolicy(heartbeat_interval_s=1.0, miss_threshold=3)  # grace 5 s


def tick(at: float) -> Any:
    from regions.loop.control import run_tick

    result = run_tick(at, interval_s=1.0)
    assert result.ran
    return result


def states(store: Any) -> dict[str, str]:
    return {r: s.state.value for r, s in store.table().regions.items()}


def test_a_process_that_keeps_failing_holds_the_loop_only_up_to_the_cap(
    feed: Any, fresh_hot_state: Any, settings: Any
) -> None:
    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "LOOP_HOLD_MAX_S": 20}
    feed(T0)
    tick(T0)
    assert states(fresh_hot_state)["us-east"] == "healthy"
    held = []
    for k in range(1, 40):
        # One web process keeps refusing heartbeats; us-east's agents are really silent.
        fresh_hot_state.add_impairment("web-1", (T0 + 1, T0 + k))
        feed(T0 + k, NOT_US)
        held.append(tick(T0 + k).held)
    assert all(held[:18]), "the loop did not hold at first"
    assert not any(held[20:]), "the hold outlived its cap"
    assert states(fresh_hot_state)["us-east"] == "down"
    assert states(fresh_hot_state)["eu-west"] == "healthy"


def test_without_a_cap_the_hold_lasts_as_long_as_the_impairment(
    feed: Any, fresh_hot_state: Any, settings: Any
) -> None:
    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "LOOP_HOLD_MAX_S": 0}
    feed(T0)
    tick(T0)
    for k in range(1, 40):
        fresh_hot_state.add_impairment("web-1", (T0 + 1, T0 + k))
        feed(T0 + k, NOT_US)
        assert tick(T0 + k).held
    assert states(fresh_hot_state)["us-east"] == "healthy"


def test_spells_chained_within_the_grace_count_as_one_hold() -> None:
    from regions.loop.hold import holding

    # Spells of different processes, each short, never more than the 5 s grace apart.
    spells = [(T0 + 6 * i, T0 + 6 * i + 2) for i in range(20)]
    assert holding(spells, POLICY, T0 + 30, max_s=60) is not None
    assert holding(spells, POLICY, T0 + 61, max_s=60) is None
    # A break longer than the grace starts the count over.
    later = [(T0 + 200, T0 + 201)]
    assert holding(spells + later, POLICY, T0 + 202, max_s=60) == (T0 + 200, T0 + 201)


def test_a_bad_cap_setting_is_named(settings: Any) -> None:
    from regions.conf import loop_hold_max_s

    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "LOOP_HOLD_MAX_S": "soon"}
    with pytest.raises(ValueError, match="TRAFFICMGR_LOOP_HOLD_MAX_S"):
        loop_hold_max_s()
    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "LOOP_HOLD_MAX_S": -1}
    with pytest.raises(ValueError, match="TRAFFICMGR_LOOP_HOLD_MAX_S"):
        loop_hold_max_s()
