"""Per-request picker: each strategy's rule, the AI-aware cost model, speed paths, reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from trafficmgr.routing.estimator import OutputLengthEstimator
from trafficmgr.routing.picker import (
    STRATEGIES,
    AiAwarePicker,
    EndpointLoad,
    make_picker,
)
from trafficmgr.routing.types import (
    AdminState,
    ClientLocation,
    Endpoint,
    GpuProfile,
    Priority,
    Request,
)

H100 = GpuProfile("H100", 12000, 2400, 64)
A100 = GpuProfile("A100", 6000, 1300, 48)
L4 = GpuProfile("L4", 1500, 350, 16)
CLIENT = ClientLocation("DE", "EU")


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """The engine needs no Django settings."""


def load(
    name: str,
    profile: GpuProfile = H100,
    gpus: int = 8,
    models: tuple[str, ...] = ("big", "small"),
    **kw: object,
) -> EndpointLoad:
    endpoint = Endpoint(name, "eu-west", f"{name}:8000", profile.name, gpus, models)
    if "admin_state" in kw:
        endpoint = replace(endpoint, admin_state=kw.pop("admin_state"))  # type: ignore[arg-type]
    return EndpointLoad(endpoint, profile, **kw)  # type: ignore[arg-type]


def req(
    model: str = "big",
    tokens: int = 2000,
    priority: Priority = Priority.INTERACTIVE,
    hashes: tuple[int, ...] = (),
) -> Request:
    return Request(model, CLIENT, tokens, 512, priority, hashes)


def test_round_robin_cycles_over_the_endpoints_serving_the_model() -> None:
    picker = make_picker("round_robin")
    loads = (load("a"), load("b", models=("small",)), load("c"), load("d"))
    picks = [picker.pick(req(), loads, 0).endpoint for _ in range(6)]
    assert Counter(picks) == {"a": 2, "c": 2, "d": 2}


def test_least_connections_counts_running_and_waiting() -> None:
    loads = (load("a", running=3), load("b", running=1, waiting=3), load("c", running=2))
    assert make_picker("least_connections").pick(req(), loads, 0).endpoint == "c"


def test_weighted_follows_weight_times_capacity() -> None:
    picker = make_picker("weighted")
    loads = (load("h", H100, 8), load("a", A100, 8))
    picks = Counter(picker.pick(req(), loads, 0).endpoint for _ in range(3300))
    assert picks["h"] / picks["a"] == pytest.approx(2400 / 1300, rel=0.01)


def test_latency_explores_unobserved_then_takes_the_lowest_ewma() -> None:
    picker = make_picker("latency")
    assert picker.pick(req(), (load("a", latency_ewma_ms=300), load("b")), 0).endpoint == "b"
    loads = (load("a", latency_ewma_ms=300), load("b", latency_ewma_ms=120))
    assert picker.pick(req(), loads, 0).endpoint == "b"


def test_least_outstanding_work_divides_work_by_speed() -> None:
    loads = (
        load("fast", H100, 8, outstanding_prefill_tokens=48000),  # 0.5 s
        load("slow", L4, 4, models=("big",), outstanding_prefill_tokens=4000),
    )  # 0.67 s
    assert make_picker("least_outstanding_work").pick(req(), loads, 0).endpoint == "fast"


def test_ai_aware_prefers_the_fast_gpu_when_idle_where_work_counting_ties() -> None:
    loads = (load("l4", L4, 4), load("h100", H100, 8))
    pick = make_picker("ai_aware").pick(req(tokens=3000), loads, 0)
    assert pick.endpoint == "h100"
    assert pick.expected_latency_s > 0
    assert "earliest expected completion" in pick.reason


def test_ai_aware_goes_to_the_slower_gpu_when_the_fast_one_is_queued() -> None:
    loads = (load("l4", L4, 4), load("h100", H100, 8, outstanding_prefill_tokens=400_000))
    assert make_picker("ai_aware").pick(req(tokens=500), loads, 0).endpoint == "l4"
    # a long prompt still waits for the fast GPU: 4 s queue + 0.1 s beats 6.7 s on the L4
    assert make_picker("ai_aware").pick(req(tokens=40_000), loads, 0).endpoint == "h100"


def test_ai_aware_is_work_conserving_within_the_queue_it_leaves() -> None:
    # the H100 finishes first (0.25 s queue + its service) but an idle L4 finishes within
    # that queue of it: the L4 takes the request instead of leaving it to queue
    idle_l4 = load("l4", L4, 4)
    queued = load("h100", H100, 8, outstanding_prefill_tokens=0.25 * 96_000)
    picker = make_picker("ai_aware")
    pick = picker.pick(req(tokens=300), (queued, idle_l4), 0)
    assert pick.endpoint == "l4"
    assert "work-conserving: h100 would complete it" in pick.reason
    assert "earliest" not in pick.reason
    # a shorter queue is not worth the L4's slower service
    short = load("h100", H100, 8, outstanding_prefill_tokens=0.05 * 96_000)
    assert picker.pick(req(tokens=300), (short, idle_l4), 0).endpoint == "h100"


def test_ai_aware_moves_a_request_by_at_most_its_own_service_time() -> None:
    # a 4 s queue on the H100 would allow moving a long prompt to the A100 x 1, but that
    # would take it far longer than its own service on the H100: it stays
    slow = load("a100", A100, 1)
    queued = load("h100", H100, 8, outstanding_prefill_tokens=4 * 96_000)
    pick = make_picker("ai_aware").pick(req(tokens=30_000), (queued, slow), 0)
    assert pick.endpoint == "h100"


def test_ai_aware_does_not_give_up_a_cached_prefix_for_balance() -> None:
    # as in the work-conserving case, the idle L4 would finish within the H100's queue, but
    # the H100 holds the prompt's prefix: moving would compute it again
    blocks = (0, 1)
    idle_l4 = load("l4", L4, 4)
    queued = load("h100", H100, 8, outstanding_prefill_tokens=0.3 * 96_000)
    picker = make_picker("ai_aware")
    assert picker.pick(req(tokens=1100, hashes=blocks), (queued, idle_l4), 0).endpoint == "l4"
    warm = replace(queued, cached_prefixes=frozenset(blocks))
    pick = picker.pick(req(tokens=1100, hashes=blocks), (warm, idle_l4), 0)
    assert pick.endpoint == "h100"
    assert "1024 cached" in pick.reason


def test_ai_aware_uses_the_prefix_cache() -> None:
    blocks = tuple(range(16))
    loads = (
        load("cold", outstanding_prefill_tokens=2000),
        load("warm", outstanding_prefill_tokens=2000, cached_prefixes=frozenset(blocks)),
        load("idle"),
    )
    pick = make_picker("ai_aware").pick(req(tokens=9000, hashes=blocks), loads, 0)
    assert pick.endpoint == "warm"
    assert "8192 cached" in pick.reason


def test_ai_aware_full_endpoint_waits_for_a_slot() -> None:
    full = load("full", H100, 1, running=64, outstanding_decode_tokens=64 * 300)
    free = load("free", A100, 1, running=10, outstanding_decode_tokens=10 * 300)
    pick = make_picker("ai_aware").pick(req(tokens=100), (full, free), 0)
    assert pick.endpoint == "free"


def test_batch_requests_keep_away_from_busy_endpoints_and_are_shed_when_all_are() -> None:
    busy, calm = load("busy", gpu_util=0.95), load("calm", L4, 4, gpu_util=0.3)
    picker = make_picker("ai_aware")
    assert picker.pick(req(), (busy, calm), 0).endpoint == "busy"
    assert picker.pick(req(priority=Priority.BATCH), (busy, calm), 0).endpoint == "calm"
    shed = picker.pick(req(priority=Priority.BATCH), (busy,), 0)
    assert shed.endpoint is None
    assert "shed" in shed.reason and "80%" in shed.reason


@pytest.mark.parametrize("name", STRATEGIES)
def test_refusals_say_why(name: str) -> None:
    picker = make_picker(name)
    only_small = (load("a", models=("small",)),)
    assert picker.pick(req("big"), only_small, 0).endpoint is None
    assert "no endpoint serves big" in picker.pick(req("big"), only_small, 0).reason
    sick = (load("a", healthy=False), load("b", admin_state=AdminState.DRAINED))
    refusal = picker.pick(req("big"), sick, 0)
    assert refusal.endpoint is None and "healthy and active" in refusal.reason
    assert picker.pick(req("big"), (), 0).endpoint is None


def test_make_picker_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="known: round_robin"):
        make_picker("fastest")


def test_expected_output_comes_from_what_was_observed() -> None:
    picker = make_picker("ai_aware")
    for _ in range(200):
        picker.observe("big", 40)
    pick = picker.pick(req(), (load("a"),), 0)
    assert pick.expected_output_tokens == pytest.approx(40, rel=0.06)


def _fleet_of(n: int) -> tuple[EndpointLoad, ...]:
    return tuple(
        load(
            f"e{i}",
            (H100, A100, L4)[i % 3],
            1 + i % 8,
            ("big", "small") if i % 3 else ("small",),
            outstanding_prefill_tokens=float((i * 7919) % 50_000),
            running=i % 20,
        )
        for i in range(n)
    )


def test_sampling_path_picks_a_good_endpoint_among_many() -> None:
    loads = _fleet_of(1000)
    picker = AiAwarePicker(seed=1)
    for _ in range(50):
        pick = picker.pick(req("big"), loads, 0)
        assert pick.endpoint is not None
        assert "sampled from" in pick.reason
    # the snapshot's work sent since it was taken spreads the picks instead of herding
    picks = Counter(picker.pick(req("big"), loads, 0).endpoint for _ in range(200))
    assert max(picks.values()) < 40


def test_sampling_finds_the_prefix_holder_through_its_routing_history() -> None:
    loads = [load(f"e{i}") for i in range(1000)]
    blocks = tuple(range(100, 140))
    picker = AiAwarePicker(seed=2, memory=0)  # no memory: only the prefix index can find it
    first = picker.pick(req("big", 30_000, hashes=blocks), tuple(loads), 0).endpoint
    assert first is not None
    k = next(i for i, c in enumerate(loads) if c.endpoint.name == first)
    loads[k] = replace(loads[k], cached_prefixes=frozenset(blocks))
    for _ in range(20):
        again = picker.pick(req("big", 30_000, hashes=blocks), tuple(loads), 0)
        assert again.endpoint == first
        assert "20480 cached" in again.reason


def test_prepare_precomputes_a_snapshot() -> None:
    loads = _fleet_of(200)
    picker = AiAwarePicker()
    picker.prepare(loads)
    assert picker.pick(req(), loads, 0).endpoint is not None


def test_estimator_is_shared_when_given() -> None:
    shared = OutputLengthEstimator()
    picker = make_picker("least_connections", estimator=shared)
    picker.observe("big", 10)
    assert shared.count("big") == 1
