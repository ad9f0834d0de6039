"""Endpoint and region health from heartbeats."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from trafficmgr.routing.health import Observation, RegionHealth, endpoint_health, region_health
from trafficmgr.routing.types import (
    AdminState,
    Endpoint,
    FailoverPolicy,
    Fleet,
    GpuProfile,
    Heartbeat,
    Region,
)

Beat = Callable[..., Heartbeat]
POLICY = FailoverPolicy(heartbeat_interval_s=1.0, miss_threshold=3)


@pytest.fixture
def euw1(fleet: Fleet) -> Endpoint:
    return fleet.region("eu-west").endpoints[0]


@pytest.fixture
def h100(fleet: Fleet) -> GpuProfile:
    return fleet.gpu_profiles["H100"]


def test_fresh_heartbeat_is_healthy_at_full_capacity(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    health = endpoint_health(euw1, beat("euw-1", now - 0.5), h100, POLICY, now)
    assert health.healthy and health.evidence and health.reason == "ok"
    assert health.score == 1.0
    assert health.capacity == health.nominal == 2400 * 8
    assert health.load == health.demand == pytest.approx(0.4)  # GPUs 40% busy, KV 30%
    assert health.models == ("llama-3-70b", "llama-3-8b")


def test_no_heartbeat_yet_is_no_evidence(euw1: Endpoint, h100: GpuProfile, now: float) -> None:
    health = endpoint_health(euw1, None, h100, POLICY, now)
    assert not health.healthy and not health.evidence and health.capacity == 0


def test_missed_heartbeats_below_the_threshold_keep_it_up(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    assert endpoint_health(euw1, beat("euw-1", now - 2.9), h100, POLICY, now).healthy


def test_stale_heartbeat_takes_it_out_and_says_why(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    health = endpoint_health(euw1, beat("euw-1", now - 3.5), h100, POLICY, now)
    assert not health.healthy and health.evidence
    assert health.reason == "heartbeat 3.5 s old > 3 x 1 s"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"probe_ok": False}, "probe failed"),
        ({"gpu": {"xid_errors": 1}}, "xid errors on GPU 0"),
        ({"gpu": {"ecc_errors": 2}}, "ecc errors on GPU 0"),
        ({"server": {"models_loaded": ("other-model",)}}, "none of its models loaded"),
    ],
)
def test_failures_make_it_unhealthy(
    euw1: Endpoint,
    h100: GpuProfile,
    beat: Beat,
    now: float,
    changes: dict[str, object],
    reason: str,
) -> None:
    health = endpoint_health(euw1, beat("euw-1", now, **changes), h100, POLICY, now)
    assert not health.healthy and health.capacity == 0 and health.reason == reason


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"gpu": {"throttle_reasons": ("sw_thermal_slowdown",)}}, "throttled on 8/8 GPUs"),
        ({"gpu": {"throttle_reasons": ("HwPowerBrakeSlowdown",)}}, "throttled"),
        ({"gpu": {"temp_c": 93.0}}, "throttled"),
    ],
)
def test_throttling_degrades_score_and_capacity(
    euw1: Endpoint,
    h100: GpuProfile,
    beat: Beat,
    now: float,
    changes: dict[str, object],
    words: str,
) -> None:
    health = endpoint_health(euw1, beat("euw-1", now, **changes), h100, POLICY, now)
    assert health.healthy
    assert 0 < health.score < 1 and health.capacity < health.nominal
    assert words in health.reason


@pytest.mark.parametrize(
    ("server", "words", "demand"),
    [
        ({"kv_cache_usage": 0.97}, "KV cache 97% full", 0.97),
        ({"requests_waiting": 512}, "queue saturated", 0.4 + 512 / 512),
    ],
)
def test_saturation_lowers_the_score_and_raises_demand_not_capacity(
    euw1: Endpoint,
    h100: GpuProfile,
    beat: Beat,
    now: float,
    server: dict[str, object],
    words: str,
    demand: float,
) -> None:
    health = endpoint_health(euw1, beat("euw-1", now, server=server), h100, POLICY, now)
    assert health.healthy and 0 < health.score < 1 and words in health.reason
    assert health.capacity == health.nominal  # a saturated endpoint is not slower: it is asked more
    assert health.demand == pytest.approx(demand)
    assert health.load == pytest.approx(min(1.0, demand))


@pytest.mark.parametrize(
    ("server", "util", "demand"),
    [
        ({"requests_running": 8, "kv_cache_usage": 0.3}, 40.0, 0.4),  # GPU busy time dominates
        ({"requests_running": 8, "kv_cache_usage": 0.7}, 40.0, 0.7),  # KV cache dominates
        ({"requests_running": 512, "kv_cache_usage": 0.3}, 40.0, 1.0),  # every slot busy
        ({"requests_running": 512, "requests_waiting": 256}, 100.0, 1.5),  # half as much again
        ({"requests_running": 8, "kv_cache_usage": 0.1}, 100.0, 1.0),  # prefill-bound: GPUs busy
    ],
)
def test_demand_counts_busy_share_and_the_queue_beyond_capacity(
    euw1: Endpoint,
    h100: GpuProfile,
    beat: Beat,
    now: float,
    server: dict[str, object],
    util: float,
    demand: float,
) -> None:
    hb = beat("euw-1", now, server=server, gpu={"util_pct": util})
    health = endpoint_health(euw1, hb, h100, POLICY, now)
    assert health.demand == pytest.approx(demand)
    assert health.load == pytest.approx(min(1.0, demand))


def test_demand_without_a_server_sample_is_gpu_busy_time(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    hb = replace(beat("euw-1", now, gpu={"util_pct": 65.0}), server=None)
    assert endpoint_health(euw1, hb, h100, POLICY, now).demand == pytest.approx(0.65)


def test_benign_clock_reasons_do_not_degrade(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    reasons = ("gpu_idle", "applications_clocks_setting", "sync_boost")
    health = endpoint_health(
        euw1, beat("euw-1", now, gpu={"throttle_reasons": reasons}), h100, POLICY, now
    )
    assert health.score == 1.0


def test_partly_loaded_models_limit_what_it_serves(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    hb = beat("euw-1", now, server={"models_loaded": ("llama-3-8b",)})
    health = endpoint_health(euw1, hb, h100, POLICY, now)
    assert health.healthy and health.models == ("llama-3-8b",)
    assert "only llama-3-8b loaded" in health.reason


def test_drained_endpoint_takes_no_traffic(
    euw1: Endpoint, h100: GpuProfile, beat: Beat, now: float
) -> None:
    drained = replace(euw1, admin_state=AdminState.DRAINED)
    health = endpoint_health(drained, beat("euw-1", now), h100, POLICY, now)
    assert not health.healthy and health.capacity == 0 and health.reason == "endpoint drained"


def _region_health(
    fleet: Fleet, region: Region, beats: dict[str, Heartbeat], now: float
) -> RegionHealth:
    healths = [
        endpoint_health(e, beats.get(e.name), fleet.gpu_profiles[e.gpu], POLICY, now)
        for e in region.endpoints
    ]
    return region_health(region, healths)


def test_region_with_all_endpoints_ok_is_good(fleet: Fleet, beat: Beat, now: float) -> None:
    region = fleet.region("eu-west")
    beats = {e.name: beat(e.name, now, gpus=e.gpus) for e in region.endpoints}
    health = _region_health(fleet, region, beats, now)
    assert health.observation is Observation.GOOD
    assert health.capacity == health.nominal == 2400 * 8 + 1300 * 4
    assert health.demand == pytest.approx(0.4) and health.headroom == pytest.approx(0.6)
    assert health.models == {"llama-3-70b": 2400 * 8, "llama-3-8b": 2400 * 8 + 1300 * 4}


def test_region_demand_is_capacity_weighted_and_exceeds_one_when_overloaded(
    fleet: Fleet, beat: Beat, now: float
) -> None:
    region = fleet.region("eu-west")  # euw-1: 8 x H100 (19,200 tokens/s); euw-2: 4 x A100 (5,200)
    busy = {"requests_running": 512, "requests_waiting": 512}  # twice what it can run
    beats = {
        "euw-1": beat("euw-1", now, server=busy, gpu={"util_pct": 100.0}),
        "euw-2": beat("euw-2", now, gpus=4, gpu={"util_pct": 50.0}),
    }
    health = _region_health(fleet, region, beats, now)
    expected = (19_200 * 2.0 + 5_200 * 0.5) / (19_200 + 5_200)
    assert health.demand == pytest.approx(expected) and expected > 1
    assert health.headroom == 0.0
    # Busy is not broken: never bad (no failover for load), but a queue of four times its limit
    # on 79 % of the capacity misses the objective: degraded.
    assert health.observation is Observation.DEGRADED
    assert f"demand {expected:.0%} of capacity" in health.reason
    assert "79% of capacity missing its objective" in health.reason


def test_region_losing_its_big_endpoint_is_degraded(fleet: Fleet, beat: Beat, now: float) -> None:
    region = fleet.region("eu-west")
    beats = {"euw-1": beat("euw-1", now, probe_ok=False), "euw-2": beat("euw-2", now, gpus=4)}
    health = _region_health(fleet, region, beats, now)
    assert health.observation is Observation.DEGRADED
    assert "euw-1: probe failed" in health.reason
    assert health.models == {"llama-3-8b": 1300 * 4}


def test_region_with_no_serving_endpoint_is_bad(fleet: Fleet, beat: Beat, now: float) -> None:
    region = fleet.region("eu-west")
    beats = {e.name: beat(e.name, now - 10) for e in region.endpoints}
    health = _region_health(fleet, region, beats, now)
    assert health.observation is Observation.BAD and health.capacity == 0
    assert "heartbeat 10.0 s old" in health.reason


def test_region_without_heartbeats_has_no_evidence(fleet: Fleet, now: float) -> None:
    health = _region_health(fleet, fleet.region("eu-west"), {}, now)
    assert health.observation is Observation.NONE


def test_drained_region_and_empty_region(fleet: Fleet, beat: Beat, now: float) -> None:
    drained = _region_health(fleet, fleet.region("us-east"), {"use-1": beat("use-1", now)}, now)
    assert drained.observation is Observation.DRAINED and drained.capacity == 0
    empty = replace(fleet.region("eu-west"), endpoints=())
    health = _region_health(fleet, empty, {}, now)
    assert health.observation is Observation.BAD and health.reason == "no endpoints configured"
