"""The per-region failover state machine, driven through evaluate_fleet."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest

from trafficmgr.routing.failover import MIN_RAMP, FleetEvaluation, RegionMachine, evaluate_fleet
from trafficmgr.routing.types import AdminState, Fleet, Heartbeat, ProbeSample, RegionState

Beats = Callable[..., dict[str, Heartbeat]]
S = RegionState


def run(
    fleet: Fleet,
    ticks: Iterable[tuple[float, dict[str, Heartbeat]]],
    machines: dict[str, RegionMachine] | None = None,
) -> list[FleetEvaluation]:
    """Evaluate the fleet at each (time, heartbeats) in turn, carrying the machines."""
    out = []
    carried = machines or {}
    for at, beats in ticks:
        evaluation = evaluate_fleet(fleet, beats, carried, at)
        carried = dict(evaluation.machines)
        out.append(evaluation)
    return out


def state(evaluation: FleetEvaluation, region: str = "eu-west") -> RegionState:
    return evaluation.machines[region].state


def healthy_until(fleet: Fleet, beats: Beats, now: float) -> dict[str, RegionMachine]:
    """Return machines after two healthy ticks ending at ``now``."""
    return dict(
        run(fleet, [(now - 1, beats(fleet, now - 1)), (now, beats(fleet, now))])[-1].machines
    )


def test_no_region_is_up_or_down_before_the_first_evidence(fleet: Fleet, now: float) -> None:
    (first,) = run(fleet, [(now, {})])
    assert state(first) is S.UNKNOWN and state(first, "ap-south") is S.UNKNOWN
    assert state(first, "us-east") is S.DRAINED
    status = first.statuses["eu-west"]
    assert status.state is S.UNKNOWN and status.capacity == 2400 * 8 + 1300 * 4
    assert status.headroom == 1.0 and "no evidence yet" in status.reason
    assert [t.region for t in first.transitions] == ["us-east"]


def test_first_evidence_makes_a_region_healthy_at_once(
    fleet: Fleet, beats: Beats, now: float
) -> None:
    _, second = run(fleet, [(now, {}), (now + 1, beats(fleet, now + 1))])
    assert state(second) is S.HEALTHY and state(second, "ap-south") is S.HEALTHY
    (t,) = [t for t in second.transitions if t.region == "eu-west"]
    assert (t.old, t.new, t.at) == (S.UNKNOWN, S.HEALTHY, now + 1)
    assert "2/2 endpoints serving" in t.reason


def test_a_region_silent_since_start_goes_down_after_the_grace(fleet: Fleet, now: float) -> None:
    evaluations = run(fleet, [(now, {}), (now + 2.5, {}), (now + 3.5, {})])
    assert [state(e) for e in evaluations] == [S.UNKNOWN, S.UNKNOWN, S.DOWN]
    assert "no heartbeat from any endpoint" in evaluations[-1].transitions[0].reason


def test_one_missed_heartbeat_never_takes_a_region_out(
    fleet: Fleet, beats: Beats, now: float
) -> None:
    machines = healthy_until(fleet, beats, now)
    last = beats(fleet, now)
    evaluations = run(fleet, [(now + 1.5, last), (now + 2.9, last), (now + 3.5, last)], machines)
    assert [state(e) for e in evaluations] == [S.HEALTHY, S.HEALTHY, S.DOWN]
    assert evaluations[-1].statuses["eu-west"].ramp == 0.0


def test_down_threshold_counts_consecutive_bad_evaluations(
    fleet: Fleet, beats: Beats, now: float
) -> None:
    fleet = replace(fleet, failover=replace(fleet.failover, down_threshold=2))
    machines = healthy_until(fleet, beats, now)
    stale = beats(fleet, now)
    evaluations = run(fleet, [(now + 4, stale), (now + 5, stale)], machines)
    assert [state(e) for e in evaluations] == [S.HEALTHY, S.DOWN]


def test_recovery_waits_for_up_threshold_and_hold_down_then_ramps(
    fleet: Fleet, beats: Beats, now: float
) -> None:
    machines = healthy_until(fleet, beats, now)
    (down,) = run(fleet, [(now + 4, beats(fleet, now))], machines)
    assert state(down) is S.DOWN
    times = [now + 5, now + 6, now + 8, now + 9, now + 24, now + 38, now + 40]
    evaluations = run(fleet, [(t, beats(fleet, t)) for t in times], dict(down.machines))
    seen = [state(e) for e in evaluations]
    assert seen == [S.DOWN, S.DOWN, S.DOWN, S.RECOVERING, S.RECOVERING, S.RECOVERING, S.HEALTHY]
    ramps = [e.statuses["eu-west"].ramp for e in evaluations[3:]]
    assert ramps[0] == MIN_RAMP and ramps[1] == pytest.approx(0.5) and ramps[-1] == 1.0
    assert "slow start" in evaluations[3].transitions[0].reason


def test_degraded_and_back_respect_the_hold_down(fleet: Fleet, beats: Beats, now: float) -> None:
    machines = healthy_until(fleet, beats, now)

    def degraded(at: float) -> dict[str, Heartbeat]:
        hb = beats(fleet, at)
        hb["euw-1"] = replace(hb["euw-1"], probe=ProbeSample(ok=False))
        return hb

    ticks = [
        (now + 1, degraded(now + 1)),
        (now + 5, degraded(now + 5)),
        (now + 6, beats(fleet, now + 6)),
        (now + 10, beats(fleet, now + 10)),
    ]
    evaluations = run(fleet, ticks, machines)
    # healthy since `now - 1`; the hold-down (5 s) ends at now + 4
    assert [state(e) for e in evaluations] == [S.HEALTHY, S.DEGRADED, S.DEGRADED, S.HEALTHY]


def test_paused_machine_does_not_fail_over(fleet: Fleet, beats: Beats, now: float) -> None:
    machines = healthy_until(fleet, beats, now)
    machines["eu-west"] = replace(machines["eu-west"], paused=True)
    (evaluation,) = run(fleet, [(now + 10, beats(fleet, now))], machines)
    assert state(evaluation) is S.HEALTHY
    assert [t for t in evaluation.transitions if t.region == "eu-west"] == []
    assert "failover paused" in evaluation.statuses["eu-west"].reason
    assert evaluation.machines["eu-west"].bad_streak == 1


def test_drain_is_immediate_and_undrain_ramps(fleet: Fleet, beats: Beats, now: float) -> None:
    machines = healthy_until(fleet, beats, now)
    region = fleet.region("eu-west")
    drained = replace(
        fleet,
        regions=tuple(
            replace(r, admin_state=AdminState.DRAINED) if r is region else r for r in fleet.regions
        ),
    )
    (evaluation,) = run(drained, [(now + 0.5, beats(fleet, now))], machines)
    assert state(evaluation) is S.DRAINED
    assert evaluation.statuses["eu-west"].capacity == 0
    (back,) = run(fleet, [(now + 1, beats(fleet, now + 1))], dict(evaluation.machines))
    assert state(back) is S.RECOVERING


def test_every_endpoint_gets_a_health_verdict(fleet: Fleet, beats: Beats, now: float) -> None:
    (evaluation,) = run(fleet, [(now, beats(fleet, now))])
    assert set(evaluation.endpoints) == {e.name for e in fleet.endpoints()}
    assert evaluation.endpoints["use-1"].healthy  # the endpoint itself is fine ...
    assert evaluation.regions["us-east"].capacity == 0  # ... but its region is drained
    assert evaluation.statuses["us-east"].state is S.DRAINED
