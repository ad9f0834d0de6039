"""Output-length estimator and service model: learning, capping, forgetting, scaling."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafficmgr.routing.estimator import (
    OutputLengthEstimator,
    cost_terms,
    service_rates,
)
from trafficmgr.routing.types import GpuProfile

H100 = GpuProfile("H100", 12000, 2400, 64)


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """The engine needs no Django settings."""


def test_prior_before_any_observation() -> None:
    est = OutputLengthEstimator(prior_tokens=128)
    assert est.expected("m") == pytest.approx(128, rel=0.06)
    assert est.expected("m", max_output_tokens=50) == 50
    assert est.count("m") == 0


def test_learns_the_mean_and_quantiles_of_a_distribution() -> None:
    rng = random.Random(1)
    est = OutputLengthEstimator()
    samples = [int(rng.lognormvariate(4, 1)) + 1 for _ in range(3000)]
    for s in samples:
        est.observe("m", s)
    ordered = sorted(samples)
    assert est.expected("m") == pytest.approx(sum(samples) / len(samples), rel=0.08)
    for q in (0.5, 0.9, 0.99):
        assert est.quantile("m", q) == pytest.approx(ordered[int(q * len(ordered))], rel=0.12)
    assert est.count("m") == 3000


def test_capped_expectation_is_the_mean_of_min_length_cap() -> None:
    est = OutputLengthEstimator(prior_weight=1e-9)
    for s in [10] * 50 + [1000] * 50:
        est.observe("m", s)
    assert est.expected("m", 100) == pytest.approx((10 + 100) / 2, rel=0.06)


def test_models_are_learned_separately() -> None:
    est = OutputLengthEstimator()
    for _ in range(100):
        est.observe("chat", 300)
        est.observe("code", 12)
    assert est.expected("chat") > 10 * est.expected("code")


def test_forgets_old_traffic_after_the_window() -> None:
    est = OutputLengthEstimator(window=256)
    for _ in range(2000):
        est.observe("m", 20)
    for _ in range(1500):
        est.observe("m", 400)
    assert est.expected("m") == pytest.approx(400, rel=0.1)


def test_bad_observations_are_ignored() -> None:
    est = OutputLengthEstimator()
    for bad in (float("nan"), float("inf"), -3):
        est.observe("m", bad)
    assert est.count("m") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 100_000), min_size=1, max_size=200), st.integers(1, 50_000))
def test_expected_is_within_the_observed_range_and_the_cap(samples: list[int], cap: int) -> None:
    est = OutputLengthEstimator(prior_weight=1e-9)
    for s in samples:
        est.observe("m", s)
    value = est.expected("m", cap)
    assert 0 <= value <= cap * 1.000001
    assert value <= max(samples) * 1.06 + 1e-6


def test_service_rates_scale_with_gpus() -> None:
    one, eight = service_rates(H100, 1), service_rates(H100, 8)
    assert eight.prefill_tokens_per_s == 8 * one.prefill_tokens_per_s == 96000
    assert eight.decode_tokens_per_s == 8 * 2400 and eight.max_concurrency == 512
    assert eight.single_stream_tokens_per_s == one.single_stream_tokens_per_s == 300
    assert eight.decode_rate(1) == 300 and eight.decode_rate(512) == pytest.approx(37.5)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 600), st.integers(0, 600), st.floats(0, 1e6), st.floats(0, 1e6))
def test_more_load_never_makes_an_endpoint_look_faster(
    running: int, waiting: int, prefill: float, decode: float
) -> None:
    rates = service_rates(H100, 8)
    base = cost_terms(rates, running, waiting, prefill, decode, 0.5, 0.5)
    more = cost_terms(rates, running + 1, waiting + 1, prefill + 1000, decode + 100, 0.5, 0.5)
    assert more.completion_s(1000, 50) >= base.completion_s(1000, 50)


def _as_histogram(samples: list[float], le: list[float]) -> tuple[list[int], int]:
    """Cumulative counts per bound, as a Prometheus histogram exposes them."""
    return [sum(1 for s in samples if s <= b) for b in le], len(samples)


def test_histogram_deltas_teach_the_expected_length() -> None:
    rng = random.Random(7)
    samples = [rng.lognormvariate(6.0, 0.6) for _ in range(20_000)]  # median ~400 tokens
    truth_mean = sum(samples) / len(samples)
    truth_capped = sum(min(s, 500) for s in samples) / len(samples)
    le = [10 * 1.25**i for i in range(40)]  # finite bounds 10..~60,000, as fine as TGI's
    est = OutputLengthEstimator()
    fed: list[float] = []
    prev, prev_count = [0] * len(le), 0
    for chunk in range(0, len(samples), 1000):  # one delta per heartbeat
        fed += samples[chunk : chunk + 1000]
        counts, count = _as_histogram(fed, le)
        delta = [c - p for c, p in zip(counts, prev, strict=True)]
        est.observe_histogram("m", le, delta, count - prev_count)
        prev, prev_count = counts, count
    assert est.count("m") == len(samples)
    assert est.expected("m") == pytest.approx(truth_mean, rel=0.05)
    assert est.expected("m", 500) == pytest.approx(truth_capped, rel=0.05)


def test_coarse_buckets_count_at_their_geometric_middle() -> None:
    est = OutputLengthEstimator(prior_weight=1e-9)
    est.observe_histogram("m", [1000.0, 2000.0], [0, 500], 500)
    assert est.expected("m") == pytest.approx(1414, rel=0.05)  # sqrt(1000 x 2000)
    above = OutputLengthEstimator(prior_weight=1e-9)
    above.observe_histogram("m", [10.0, 100.0], [0, 0], 40)  # all past the last bound
    assert above.expected("m") == pytest.approx(100, rel=0.05)
    first = OutputLengthEstimator(prior_weight=1e-9)
    first.observe_histogram("m", [16.0], [8], 8)  # the first bucket starts at 1 token
    assert first.expected("m") == pytest.approx(4, rel=0.05)


def test_a_large_histogram_is_one_step_and_still_forgets() -> None:
    est = OutputLengthEstimator(window=4096)
    est.observe_histogram("m", [100.0, 200.0], [10_000_000, 10_000_000], 10_000_000)
    assert est.count("m") == 10_000_000
    assert est.expected("m") == pytest.approx(10, rel=0.06)  # sqrt(1 x 100): the prior faded
    for _ in range(3):  # later traffic takes over within a few windows, as with observe()
        est.observe_histogram("m", [1000.0, 2000.0], [0, 4096], 4096)
    assert est.expected("m") > 1200


def test_empty_or_negative_deltas_change_nothing() -> None:
    est = OutputLengthEstimator()
    before = est.expected("m")
    est.observe_histogram("m", [], [], 5)
    est.observe_histogram("m", [10.0], [-3], -3)
    assert est.count("m") == 0 and est.expected("m") == before
