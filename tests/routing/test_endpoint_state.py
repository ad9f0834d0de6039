"""The state an endpoint is shown in keeps the regions' band and hold-down (endpoint_state.py).

Heartbeats go through the real ``endpoint_health`` (TTFT p99 against the world's 10 s
objective), so the strain is the one the control loop sees.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.routing.conftest import NOW, make_beat
from tests.worlds import WORLD
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.endpoint_state import (
    SERVING,
    EndpointState,
    shown_reason,
    state_from_doc,
    state_to_doc,
    step_endpoint,
)
from trafficmgr.routing.health import CALM_BELOW, STRAINED, EndpointHealth, endpoint_health

FLEET = load_fleet_text(WORLD)
EUW1 = FLEET.region("eu-west").endpoints[0]
PROFILE = FLEET.gpu_profiles[EUW1.gpu]
HOLD = FLEET.failover.hold_down_s
OBJECTIVE_MS = FLEET.slo.ttft_p99_ms
# What a tick may see: TTFT p99 well within, inside the band, just over and far over the
# objective; a silent endpoint (its last heartbeat too old) and a failed probe.
SEEN = (1_000.0, 8_500.0, 9_500.0, 11_000.0, 40_000.0, "silent", "probe failed")


def health_at(at: float, seen: float | str) -> EndpointHealth:
    """Judge euw-1 at ``at`` from what it reported."""
    if seen == "silent":
        beat = make_beat("euw-1", at - 60)
    elif seen == "probe failed":
        beat = make_beat("euw-1", at, probe_ok=False)
    else:
        beat = make_beat("euw-1", at, server={"ttft_p99_ms": seen})
    return endpoint_health(EUW1, beat, PROFILE, FLEET.failover, at, OBJECTIVE_MS)


def run(timeline: list[tuple[float, float | str]]) -> list[tuple[EndpointHealth, EndpointState]]:
    """Step euw-1's shown state through (seconds since the previous tick, what it reported)."""
    shown: EndpointState | None = None
    at = NOW
    out = []
    for gap, seen in timeline:
        at += gap
        health = health_at(at, seen)
        shown = step_endpoint(health, shown, HOLD, at)
        out.append((health, shown))
    return out


def test_a_slow_endpoint_is_degraded_and_stays_so_inside_the_band() -> None:
    steps = run([(0, 1_000.0), (HOLD, 11_000.0), (HOLD, 9_000.0), (HOLD, 7_900.0)])
    assert [s.state for _, s in steps] == ["healthy", "degraded", "degraded", "healthy"]
    health, shown = steps[2]
    assert health.state == "healthy" and shown.state == "degraded"  # 0.9: under 1, not under 0.8
    why = shown_reason(health, shown, HOLD, shown.since + HOLD)
    assert f"strain 0.90: healthy again under {CALM_BELOW:g}" in why


def test_a_change_waits_the_hold_down_since_the_previous_one() -> None:
    steps = run([(0, 40_000.0), (1, 1_000.0), (1, 1_000.0), (HOLD - 1, 1_000.0)])
    assert [s.state for _, s in steps] == ["degraded", "degraded", "degraded", "healthy"]
    health, shown = steps[1]
    assert "healthy again after the hold-down (4 s)" in shown_reason(health, shown, HOLD, NOW + 1)
    steps = run([(0, 1_000.0), (HOLD, 40_000.0), (1, 1_000.0), (1, 40_000.0)])
    assert [s.state for _, s in steps] == ["healthy", "degraded", "degraded", "degraded"]
    steps = run([(0, 40_000.0), (HOLD, 1_000.0), (1, 40_000.0)])
    health, shown = steps[2]
    assert shown.state == "healthy" and health.state == "degraded"
    assert "degraded if it lasts the hold-down (4 s)" in shown_reason(health, shown, HOLD, NOW + 6)


def test_down_is_shown_at_once_and_a_return_starts_from_the_verdict() -> None:
    steps = run([(0, 40_000.0), (1, "probe failed"), (1, 1_000.0), (1, "silent")])
    assert [s.state for _, s in steps] == ["degraded", "down", "healthy", "down"]
    assert [s.since for _, s in steps] == [NOW, NOW + 1, NOW + 2, NOW + 3]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0, HOLD, 7.0]), st.sampled_from(SEEN))))
def test_the_shown_state_keeps_the_band_and_the_hold_down(
    timeline: list[tuple[float, float | str]],
) -> None:
    steps = run(timeline)
    changes: list[float] = []
    before: EndpointState | None = None
    for health, shown in steps:
        verdict, strain = health.state, health.strain
        if verdict not in SERVING or shown.state not in SERVING:
            assert shown.state == verdict  # down and unknown: never held, never hidden
        if before is not None and shown != before:
            if {before.state, shown.state} <= set(SERVING):
                assert shown.since - before.since >= HOLD  # at most one change per hold-down
                if shown.state == "degraded":
                    assert strain >= STRAINED  # never degraded while within the objective
                else:
                    assert strain < CALM_BELOW  # never healthy again inside the band
            changes.append(shown.since)
        if before is not None and shown.since - before.since >= HOLD and before.state in SERVING:
            held_in_band = verdict == "healthy" and strain >= CALM_BELOW
            assert shown.state == verdict or (shown.state == "degraded" and held_in_band)
        if shown.state != verdict:
            assert shown_reason(health, shown, HOLD, shown.since) != health.reason
        before = shown


@pytest.mark.parametrize(
    "doc",
    [
        None,
        "degraded",
        {},
        {"state": "degraded"},
        {"state": "sleepy", "state_since": NOW},
        {"state": "healthy", "state_since": "yesterday"},
        {"state": "healthy", "state_since": True},
        {"state": "healthy", "state_since": float("nan")},
    ],
)
def test_a_carried_state_that_is_missing_or_bad_starts_afresh(doc: Any) -> None:
    assert state_from_doc(doc) is None
    health = health_at(NOW, 40_000.0)
    assert step_endpoint(health, state_from_doc(doc), HOLD, NOW) == EndpointState("degraded", NOW)


def test_a_carried_state_round_trips() -> None:
    shown = EndpointState("degraded", NOW)
    assert state_from_doc({"healthy": True, **state_to_doc(shown)}) == shown
    assert state_from_doc(state_to_doc(replace(shown, since=12))) == EndpointState("degraded", 12)
