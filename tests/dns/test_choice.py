"""The deterministic weighted choice of regions (properties over random weights and buckets)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trafficmgr.dns.choice import (
    BUCKETS,
    choose,
    choose_one,
    cumulative_weights,
    mask_prefix,
    merge_models,
    prefix_bucket,
    zone_seed,
)
from trafficmgr.routing.types import WeightedRegion

weights = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=6)
PROPERTY = settings(max_examples=200, derandomize=True, deadline=None)


def regions(ws: list[float]) -> list[WeightedRegion]:
    return [WeightedRegion(f"r{i}", w, "") for i, w in enumerate(ws)]


@PROPERTY
@given(weights, st.integers(0, BUCKETS - 1))
def test_the_bisection_picks_what_the_general_choice_picks(ws: list[float], bucket: int) -> None:
    candidates = regions(ws)
    assert choose_one(candidates, cumulative_weights(candidates), bucket) == choose(
        candidates, bucket, 1
    )


@PROPERTY
@given(weights, st.integers(0, BUCKETS - 1), st.integers(1, 6))
def test_several_picks_are_distinct_and_never_weightless(
    ws: list[float], bucket: int, count: int
) -> None:
    picked = choose(regions(ws), bucket, count)
    names = [w.region for w in picked]
    assert len(names) == len(set(names)) == min(count, sum(1 for w in ws if w > 0))
    assert all(w.weight > 0 for w in picked)


def test_buckets_share_traffic_in_proportion_to_weight() -> None:
    candidates = regions([0.6, 0.3, 0.1])
    counts = {w.region: 0 for w in candidates}
    for bucket in range(BUCKETS):
        counts[choose(candidates, bucket, 1)[0].region] += 1
    assert [round(counts[f"r{i}"] / BUCKETS, 3) for i in range(3)] == [0.6, 0.3, 0.1]


def test_bucket_is_a_stable_function_of_the_prefix() -> None:
    seed = zone_seed("infer.example.test")
    a = prefix_bucket(b"\x01\x18\x51\x02\x45", seed)
    assert a == 2829  # CRC-32: the same in every process and on every machine
    spread = {prefix_bucket(bytes([1, 24, 81, 2, i]), seed) for i in range(64)}
    assert len(spread) > 50


def test_mask_prefix_keeps_only_the_prefix_bits() -> None:
    assert mask_prefix(bytes([81, 2, 69, 142]), 24) == bytes([81, 2, 69])
    assert mask_prefix(bytes([81, 2, 255, 142]), 20) == bytes([81, 2, 0xF0])
    assert mask_prefix(bytes([81, 2, 69, 142]), 0) == b""


def test_merge_models_averages_and_keeps_residency() -> None:
    a = (WeightedRegion("eu-west", 1.0, "x"),)
    b = (WeightedRegion("eu-west", 0.5, "y"), WeightedRegion("eu-central", 0.5, "z"))
    merged = merge_models([a, b, ()])
    assert [(w.region, w.weight) for w in merged] == [("eu-west", 0.75), ("eu-central", 0.25)]
    assert merged[0].reason == "any model: x" and merge_models([(), ()]) == ()
