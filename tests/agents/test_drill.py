"""Drill instructions: obeyed for their duration only, never extended, then the truth again."""

from __future__ import annotations

import pytest

from agents.drill import MAX_DRILL_S, DrillError, DrillState, parse_drill
from agents.heartbeat import GpuReading, Heartbeat, ProbeReading, ServerReading


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


WALL = 1_735_689_600.0  # 2025-01-01T00:00:00Z


def truth() -> Heartbeat:
    return Heartbeat(
        endpoint="euw-1",
        seq=1,
        sent_at=WALL,
        interval_s=1.0,
        gpus=(GpuReading(0, "GPU-a", "H100", util_pct=50.0), GpuReading(1, "GPU-b", "H100")),
        server=ServerReading("vllm", 3, 0, 0.2, 900.0, 120.0, 400.0),
        probe=ProbeReading(True, 4.0, 200, "ok"),
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def drills(clock: Clock) -> DrillState:
    return DrillState(clock)


def test_report_unhealthy_for_its_duration_only(drills: DrillState, clock: Clock) -> None:
    drills.instruct({"kind": "report_unhealthy", "duration_s": 30}, WALL)
    hb = drills.apply(truth())
    assert hb.probe is not None and not hb.probe.ok
    assert hb.probe.reason == "drill: report_unhealthy"
    assert hb.drill == {"kind": "report_unhealthy", "id": None, "remaining_s": 30.0}
    assert hb.gpus == truth().gpus and hb.server == truth().server  # nothing else invented
    clock.t += 30
    assert drills.apply(truth()) == truth()


def test_silence(drills: DrillState, clock: Clock) -> None:
    drills.instruct({"kind": "silence", "duration_s": 5}, WALL)
    assert drills.silenced()
    clock.t += 5.01
    assert not drills.silenced()


def test_latency_adds_to_ttft_and_probe(drills: DrillState) -> None:
    drills.instruct({"kind": "latency", "duration_s": 5, "params": {"add_ms": 250}}, WALL)
    hb = drills.apply(truth())
    assert hb.server is not None and hb.probe is not None
    assert (hb.server.ttft_p50_ms, hb.server.ttft_p99_ms) == (370.0, 650.0)
    assert hb.probe.latency_ms == 254.0 and hb.probe.ok


def test_degrade_gpu(drills: DrillState) -> None:
    params = {"gpus": [1], "throttle_reasons": ["hw_power_brake"], "xid": 79}
    drills.instruct({"kind": "degrade_gpu", "duration_s": 5, "params": params}, WALL)
    gpu0, gpu1 = drills.apply(truth()).gpus
    assert gpu0 == truth().gpus[0]
    assert gpu1.throttle_reasons == ("hw_power_brake",)
    assert (gpu1.xid_errors, gpu1.xid_last) == (1, 79)


def test_degrade_gpu_defaults_to_a_thermal_throttle_on_gpu_0(drills: DrillState) -> None:
    drills.instruct({"kind": "degrade_gpu", "duration_s": 5}, WALL)
    assert drills.apply(truth()).gpus[0].throttle_reasons == ("hw_slowdown", "hw_thermal")


def test_until_is_read_on_the_control_planes_clock(drills: DrillState, clock: Clock) -> None:
    server_now = WALL + 3600  # this node's clock is an hour behind
    drills.instruct({"kind": "silence", "until": "2025-01-01T01:00:20Z"}, WALL, server_now)
    clock.t += 19.9
    assert drills.silenced()
    clock.t += 0.2
    assert not drills.silenced()


def test_until_in_the_past_is_ignored(drills: DrillState) -> None:
    assert drills.instruct({"kind": "silence", "until": "2024-12-31T23:59:00Z"}, WALL) is None
    assert drills.active() is None


def test_the_same_instruction_again_never_extends_it(drills: DrillState, clock: Clock) -> None:
    raw = {"kind": "report_unhealthy", "duration_s": 10}
    assert drills.instruct(raw, WALL)
    clock.t += 8
    assert drills.instruct(raw, WALL) is None
    clock.t += 2
    assert drills.active() is None


def test_a_finished_drill_with_an_id_is_not_restarted(drills: DrillState, clock: Clock) -> None:
    raw = {"id": "d-42", "kind": "latency", "duration_s": 1}
    drills.instruct(raw, WALL)
    clock.t += 1
    assert drills.active() is None
    assert drills.instruct(raw, WALL) is None and drills.active() is None


def test_cancel_and_replace(drills: DrillState) -> None:
    drills.instruct({"kind": "silence", "duration_s": 60}, WALL)
    drills.instruct({"kind": "latency", "duration_s": 60}, WALL)
    active = drills.active()
    assert active is not None and active.kind == "latency"
    assert drills.instruct({"kind": "none"}, WALL) == "drill latency cancelled by the control plane"
    assert drills.active() is None


def test_duration_is_capped(drills: DrillState, clock: Clock) -> None:
    drills.instruct({"kind": "silence", "duration_s": 1e9}, WALL)
    clock.t += MAX_DRILL_S
    assert not drills.silenced()


@pytest.mark.parametrize(
    "raw",
    [
        "silence",
        {"kind": "explode", "duration_s": 5},
        {"kind": "silence"},
        {"kind": "silence", "duration_s": "5"},
        {"kind": "silence", "duration_s": True},
        {"kind": "silence", "until": "tomorrow"},
        {"kind": "silence", "until": "2025-01-01T00:00:00"},  # no zone
        {"kind": "latency", "duration_s": 5, "params": [1]},
        {"kind": "silence", "duration_s": float("nan")},
    ],
)
def test_bad_instructions_are_refused(raw: object) -> None:
    with pytest.raises(DrillError):
        parse_drill(raw, 0.0, WALL, None)
