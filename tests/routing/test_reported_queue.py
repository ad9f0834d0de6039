"""What a server reports weighs in the pick when the caller has no in-flight view of its own.

``POST /api/v1/route`` sees only heartbeats. Two endpoints at full batch, one with 5,000
requests waiting and a 99 % full KV cache, the other with none waiting: the loaded one must
get a small share, not the half it got when ``build_loads`` left outstanding work at zero.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.routing.conftest import NOW, make_beat
from tests.worlds import PAIR
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.decision import build_loads
from trafficmgr.routing.estimator import cost_terms, service_rates
from trafficmgr.routing.picker import STRATEGIES, EndpointLoad, make_picker
from trafficmgr.routing.reported import peers, reported_work, with_own_flight
from trafficmgr.routing.types import ClientLocation, Fleet, GpuProfile, RegionState, Request

FULL_BATCH = 64 * 8
H100 = GpuProfile("H100", 12000, 2400, 64)


def pair() -> Fleet:
    return load_fleet_text(PAIR)


def loads_of(fleet: Fleet, busy: dict[str, float], calm: dict[str, float]) -> tuple:
    beats = {
        "busy": make_beat("busy", NOW, server=busy),
        "calm": make_beat("calm", NOW, server=calm),
    }
    return build_loads(fleet, fleet.regions[0], RegionState.HEALTHY, NOW, beats)


def shares(loads: tuple, picks: int = 400, strategy: str = "ai_aware") -> Counter[str]:
    """Pick ``picks`` requests over one heartbeat view, as /route does between two reads."""
    picker = make_picker(strategy)
    request = Request("llama", ClientLocation("IE", "EU"), 1800, 256)
    return Counter(picker.pick(request, loads, NOW).endpoint for _ in range(picks))


def test_a_long_queue_and_a_full_cache_get_a_small_share() -> None:
    loads = loads_of(
        pair(),
        busy={"requests_running": FULL_BATCH, "requests_waiting": 5000, "kv_cache_usage": 0.99},
        calm={"requests_running": FULL_BATCH, "requests_waiting": 0, "kv_cache_usage": 0.99},
    )
    got = shares(loads)
    assert got["busy"] / sum(got.values()) <= 0.05, got


def test_the_queue_is_estimated_from_the_heartbeat() -> None:
    loads = loads_of(
        pair(),
        busy={"requests_running": FULL_BATCH, "requests_waiting": 5000, "kv_cache_usage": 0.99},
        calm={"requests_running": FULL_BATCH, "requests_waiting": 0, "kv_cache_usage": 0.6},
    )
    busy, calm = loads
    assert busy.outstanding_prefill_tokens > 1_000_000
    assert busy.outstanding_decode_tokens > calm.outstanding_decode_tokens > 0
    assert calm.outstanding_prefill_tokens == 0.0


def test_least_outstanding_work_also_sees_the_queue() -> None:
    loads = loads_of(
        pair(),
        busy={"requests_running": FULL_BATCH, "requests_waiting": 5000, "kv_cache_usage": 0.99},
        calm={"requests_running": FULL_BATCH, "requests_waiting": 0, "kv_cache_usage": 0.99},
    )
    assert "least_outstanding_work" in STRATEGIES
    assert set(shares(loads, 50, "least_outstanding_work")) == {"calm"}


def test_an_idle_server_reports_no_work() -> None:
    rates = service_rates(H100, 8)
    assert reported_work(rates, 0, 0, 0.0) == (0.0, 0.0)
    assert reported_work(rates, 0, 0, 0.7) == (0.0, 0.0)


def heartbeat_view(running: int, waiting: int = 0, kv: float = 0.3) -> EndpointLoad:
    fleet = pair()
    server = {"requests_running": running, "requests_waiting": waiting, "kv_cache_usage": kv}
    return loads_of(fleet, busy=server, calm={"requests_running": 0})[0]


def test_a_burst_since_the_heartbeat_counts_in_full() -> None:
    base = heartbeat_view(2)
    mine = with_own_flight(base, 30, 50_000.0, 9_000.0, frozenset({7}), own_at_report=2)
    assert (mine.running, mine.waiting) == (30, 0)
    assert mine.outstanding_prefill_tokens == 50_000.0
    assert mine.outstanding_decode_tokens == 9_000.0 and mine.cached_prefixes == {7}


def test_own_requests_finished_since_the_heartbeat_are_not_counted_again() -> None:
    mine = with_own_flight(heartbeat_view(10), 3, 0.0, 300.0, frozenset(), own_at_report=10)
    assert mine.running + mine.waiting == 3 and mine.outstanding_decode_tokens == 300.0


def test_other_callers_requests_come_from_the_heartbeat() -> None:
    base = heartbeat_view(40)
    mine = with_own_flight(base, 10, 500.0, 1000.0, frozenset(), own_at_report=10)
    assert mine.running + mine.waiting == 40
    # the 30 others are taken to be like the caller's own 10 here
    assert mine.outstanding_prefill_tokens == pytest.approx(4 * 500.0)
    assert mine.outstanding_decode_tokens == pytest.approx(4 * 1000.0)
    alone = with_own_flight(base, 0, 0.0, 0.0, frozenset(), own_at_report=0)
    assert alone.outstanding_decode_tokens == pytest.approx(base.outstanding_decode_tokens)


def test_peers_picking_alike_are_counted_as_moving_alike() -> None:
    base = heartbeat_view(40)
    assert peers(40, 10) == 3.0 and peers(40, 0) == 0.0
    mine = with_own_flight(base, 20, 0.0, 2000.0, frozenset(), own_at_report=10, peers=3.0)
    assert mine.running + mine.waiting == 20 + 30 + 3 * 10


def test_queued_own_requests_are_not_counted_twice() -> None:
    base = heartbeat_view(FULL_BATCH, waiting=100, kv=0.95)
    mine = with_own_flight(base, 50, 0.0, 0.0, frozenset(), own_at_report=50)
    assert (mine.running, mine.waiting) == (FULL_BATCH, 100)


def _cost(running: int, waiting: int, kv: float) -> float:
    rates = service_rates(H100, 8)
    prefill, decode = reported_work(rates, running, waiting, kv)
    load = EndpointLoad(
        pair().regions[0].endpoints[0], H100, True, running, waiting, prefill, decode, kv
    )
    terms = cost_terms(
        rates,
        load.running,
        load.waiting,
        load.outstanding_prefill_tokens,
        load.outstanding_decode_tokens,
        load.kv_cache_usage,
        load.gpu_util,
    )
    return terms.completion_s(1800, 256)


@settings(max_examples=200, deadline=None)
@given(
    running=st.integers(0, 2 * FULL_BATCH),
    waiting=st.integers(0, 10_000),
    more=st.integers(1, 5_000),
    kv=st.floats(0.0, 1.0),
)
def test_more_waiting_never_looks_cheaper(running: int, waiting: int, more: int, kv: float) -> None:
    assert _cost(running, waiting + more, kv) >= _cost(running, waiting, kv)
