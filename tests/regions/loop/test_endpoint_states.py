"""Ticks carry each endpoint's shown state (band and hold-down) in the evaluation they keep.

The engine's rules are tested in tests/routing/test_endpoint_state.py; here the state must
survive from one tick to the next through the hot state, reach the dashboard's live document,
and say why it differs from the tick's verdict.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.loop.conftest import hb_doc

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0
HOLD = 5.0  # the loop world's hold-down: the policy's default


def tick(at: float) -> None:
    from regions.loop.control import run_tick

    assert run_tick(at, interval_s=1.0).ran


def with_ttft(ttft_ms: float) -> dict[str, Any]:
    server = hb_doc("euw-1", 0, T0)["server"]
    return {"server": {**server, "ttft_p99_ms": ttft_ms}}


def shown(store: Any, endpoint: str = "euw-1") -> dict[str, Any]:
    return dict(store.evaluation()["endpoints"][endpoint])


def test_a_degraded_endpoint_is_held_in_the_band_across_ticks(
    feed: Any, fresh_hot_state: Any
) -> None:
    feed(T0, **with_ttft(500.0))
    tick(T0)
    assert shown(fresh_hot_state)["state"] == "healthy"
    feed(T0 + HOLD, **with_ttft(30_000.0))  # three times the 10 s objective
    tick(T0 + HOLD)
    doc = shown(fresh_hot_state)
    assert (doc["state"], doc["state_since"], doc["healthy"]) == ("degraded", T0 + HOLD, True)
    assert doc["strain"] == pytest.approx(3.0) and "over objective" in doc["reason"]
    for k in (1, 2, HOLD + 1):  # 9 s: within the objective, not under 80 % of it
        feed(T0 + HOLD + k, **with_ttft(9_000.0))
        tick(T0 + HOLD + k)
        doc = shown(fresh_hot_state)
        assert doc["state"] == "degraded" and doc["state_since"] == T0 + HOLD, k
    assert "strain 0.90: healthy again under 0.8" in doc["reason"]
    feed(T0 + 2 * HOLD + 2, **with_ttft(500.0))
    tick(T0 + 2 * HOLD + 2)
    doc = shown(fresh_hot_state)
    assert (doc["state"], doc["state_since"]) == ("healthy", T0 + 2 * HOLD + 2)
    assert shown(fresh_hot_state, "euc-1")["state"] == "healthy"


def test_a_blip_inside_the_hold_down_is_not_shown(feed: Any, fresh_hot_state: Any) -> None:
    feed(T0, **with_ttft(30_000.0))
    tick(T0)
    feed(T0 + 1, **with_ttft(500.0))
    tick(T0 + 1)
    doc = shown(fresh_hot_state)
    assert doc["state"] == "degraded" and "healthy again after the hold-down" in doc["reason"]


def test_the_dashboard_s_live_document_carries_the_shown_state(
    feed: Any, fresh_hot_state: Any
) -> None:
    from dashboard.messages import live_doc

    feed(T0, **with_ttft(30_000.0))
    tick(T0)
    live = live_doc()["endpoints"]["euw-1"]
    assert (live["state"], live["state_since"], live["healthy"]) == ("degraded", T0, True)
    assert live["strain"] == pytest.approx(3.0)
