"""Learning from completions (prefix groups, prompt sizes, the latency tail) and the
picker's balancing within the service's P99 (trafficmgr/routing/picker.py)."""

from __future__ import annotations

import math

import pytest

from tests.routing.test_picker import A100, CLIENT, H100, L4, load
from trafficmgr.routing.estimator import (
    GROUP_KEEP,
    GROUPS,
    LatencyTail,
    OutputLengthEstimator,
)
from trafficmgr.routing.picker import TAIL_MIN_SAMPLES, AiAwarePicker, make_picker
from trafficmgr.routing.types import Priority, Request


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """The engine needs no Django settings."""


def ask(tokens: int, hashes: tuple[int, ...] = (), max_out: int = 0) -> Request:
    return Request("small", CLIENT, tokens, max_out, Priority.INTERACTIVE, hashes)


# --- the estimator's finer views ------------------------------------------------------------


def test_a_prefix_with_history_is_expected_at_its_median_and_tails_at_its_longest() -> None:
    est = OutputLengthEstimator()
    for n in (10, 900, 12, 14):
        est.observe("m", n, prefix_hashes=(7, 8))
    est.observe("m", 3000, prefix_hashes=(9,))  # another prefix: not mixed in
    assert est.expected("m", 0, (7, 99)) == 14  # same first block, any continuation
    assert est.expected("m", 11, (7,)) == 11  # still capped by max_output_tokens
    assert est.tail("m", 500, (7,)) == 900
    assert est.expected("other-model", 0, (7,)) != 14  # groups are per model


def test_a_prefix_keeps_only_its_recent_answers() -> None:
    est = OutputLengthEstimator()
    est.observe("m", 5000, prefix_hashes=(1,))
    for _ in range(GROUP_KEEP):
        est.observe("m", 20, prefix_hashes=(1,))
    assert est.tail("m", 100, (1,)) == 20
    assert len(est.group("m", (1,))) == GROUP_KEEP


def test_prefix_memory_is_bounded_and_forgets_the_least_recently_seen() -> None:
    est = OutputLengthEstimator()
    for h in range(GROUPS + 10):
        est.observe("m", 5, prefix_hashes=(h,))
    assert est.group("m", (0,)) == ()
    assert est.group("m", (GROUPS + 9,)) == [5.0]
    assert len(est._groups) == GROUPS


def test_tail_without_prefix_history_is_the_p99_of_prompts_of_that_size() -> None:
    est = OutputLengthEstimator()
    for i in range(400):  # short prompts get the long answers, as in chat traffic
        est.observe("m", 600 + i, input_tokens=40)
        est.observe("m", 5 + i % 10, input_tokens=20_000)
    assert 900 <= est.tail("m", 50) <= 1100
    assert est.tail("m", 30_000) <= 16
    assert est.tail("m", 30_000, (4,)) <= 16  # one answer for a prefix is not yet history
    est.observe("m", 80, prefix_hashes=(4,))
    est.observe("m", 90, prefix_hashes=(4,))
    assert est.tail("m", 30_000, (4,)) == 90


def test_tail_of_an_unseen_size_falls_back_to_the_model() -> None:
    est = OutputLengthEstimator()
    for _ in range(200):
        est.observe("m", 300, input_tokens=1000)
    assert 280 <= est.tail("m", 1_000_000) <= 330


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf])
def test_bad_completions_teach_nothing(bad: float) -> None:
    est = OutputLengthEstimator()
    est.observe("m", bad, input_tokens=100, prefix_hashes=(3,))
    assert est.group("m", (3,)) == ()
    assert est.count("m") == 0


def test_latency_tail_reads_the_p99_and_ignores_nonsense() -> None:
    tail = LatencyTail()
    for i in range(1000):
        tail.observe(0.1 + (i % 100) / 100)  # 0.1 .. 1.09 s
    for bad in (-1.0, 0.0, math.nan, math.inf):
        tail.observe(bad)
    assert tail.count == 1000
    assert 0.95 <= tail.quantile_s(0.99) <= 1.2


# --- balancing within the tail --------------------------------------------------------------


def region() -> tuple:
    """An H100 x 8 next to an L4 x 4 and an A100 x 4, all idle."""
    return (
        load("fast", H100, 8, ("small",)),
        load("slow", L4, 4, ("small",)),
        load("mid", A100, 4, ("small",)),
    )


def warmed(latency_s: float, picker: AiAwarePicker | None = None) -> AiAwarePicker:
    picker = picker or AiAwarePicker()
    for _ in range(TAIL_MIN_SAMPLES):
        picker.observe("small", 40, input_tokens=500, latency_s=latency_s)
    return picker


def test_before_the_tail_is_known_the_earliest_completion_wins() -> None:
    picker = AiAwarePicker()
    loads = region()
    names = [picker.pick(ask(500), loads, float(t)).endpoint for t in range(10)]
    assert set(names) == {"fast"}


def test_requests_that_fit_under_the_p99_spread_over_the_endpoints_by_use() -> None:
    picker = warmed(3.0)
    loads = region()
    names = [picker.pick(ask(500), loads, t * 0.01).endpoint for t in range(300)]
    assert {"fast", "slow", "mid"} <= set(names)
    pick = picker.pick(ask(500), loads, 3.0)
    if pick.endpoint != "fast":
        assert "balanced" in pick.reason and "P99 (3" in pick.reason


def test_work_is_shared_in_proportion_to_speed() -> None:
    """Equal use is equal utilisation: each endpoint's share follows its capacity."""
    picker = warmed(30.0)
    work: dict[str, float] = {"fast": 0.0, "slow": 0.0, "mid": 0.0}
    for t in range(2000):  # idle endpoints each time: no queue for the queue rule to move
        name = picker.pick(ask(500), region(), t * 0.01).endpoint
        work[name] += 1
    speed = {"fast": 8 * 12000, "slow": 4 * 1500, "mid": 4 * 6000}
    share = {k: work[k] / speed[k] for k in work}
    mean = sum(share.values()) / 3
    assert all(abs(v - mean) / mean < 0.15 for v in share.values()), share


def test_a_request_that_could_breach_the_p99_stays_on_the_fast_endpoint() -> None:
    picker = warmed(1.0)
    # 20,000 prompt tokens take 3.3 s on the L4 x 4 and 0.8 s on the A100 x 4: both past 1 s.
    # A fresh load report each time, so no queue builds up to move them for its own sake.
    names = {picker.pick(ask(20_000), region(), t * 0.01).endpoint for t in range(50)}
    assert names == {"fast"}


def test_a_known_long_answer_keeps_a_request_off_slow_decoders() -> None:
    picker = warmed(2.0)
    for _ in range(3):
        picker.observe("small", 1500, input_tokens=200, prefix_hashes=(77,))
    names = {picker.pick(ask(200, (77,)), region(), t * 0.01).endpoint for t in range(50)}
    assert "slow" not in names  # 1,500 tokens at the L4's single stream: ~8.6 s


def test_a_cached_prefix_is_not_given_up_for_balance() -> None:
    picker = warmed(30.0)
    fast, slow, mid = region()
    from dataclasses import replace

    fast = replace(fast, cached_prefixes=frozenset({5, 6}))
    names = {
        picker.pick(ask(1500, (5, 6)), (fast, slow, mid), t * 0.01).endpoint for t in range(40)
    }
    assert names == {"fast"}


def test_pickers_of_several_regions_share_one_tail_and_one_estimator() -> None:
    est, tail = OutputLengthEstimator(), LatencyTail()
    a = make_picker("ai_aware", estimator=est, tail=tail)
    b = make_picker("ai_aware", estimator=est, tail=tail)
    for _ in range(TAIL_MIN_SAMPLES):
        a.observe("small", 30, input_tokens=100, prefix_hashes=(1,), latency_s=0.5)
    assert isinstance(b, AiAwarePicker) and b.tail.count == TAIL_MIN_SAMPLES
    assert b.estimator.expected("small", 0, (1,)) == 30
    rr = make_picker("round_robin", estimator=est, tail=tail)  # takes the tail, ignores it
    rr.observe("small", 10, latency_s=1.0)


def test_use_survives_a_long_idle_spell_and_a_clock_going_back() -> None:
    picker = warmed(30.0)
    loads = region()
    for t in (0.0, 1.0, 10_000.0, 5.0, 1e9):  # rebasing keeps the numbers finite
        assert picker.pick(ask(500), loads, t).endpoint in {"fast", "slow", "mid"}
    assert all(math.isfinite(v) for v in picker._sent.values())
