"""Picker invariants for any candidates: a pick serves the model, or it is None with a reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafficmgr.routing.picker import (
    STRATEGIES,
    AiAwarePicker,
    EndpointLoad,
    Picker,
    make_picker,
    serves,
)
from trafficmgr.routing.types import (
    AdminState,
    ClientLocation,
    Endpoint,
    GpuProfile,
    Priority,
    Request,
)

MODELS = ("m1", "m2", "m3")
PROFILES = (
    GpuProfile("H100", 12000, 2400, 64),
    GpuProfile("L4", 1500, 350, 16),
    GpuProfile("tiny", 10, 5, 1),
)


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """The engine needs no Django settings."""


@st.composite
def endpoint_loads(draw: st.DrawFn, index: int) -> EndpointLoad:
    profile = draw(st.sampled_from(PROFILES))
    gpus = draw(st.integers(1, 16))
    models = tuple(draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True)))
    state = draw(st.sampled_from(tuple(AdminState)))
    endpoint = Endpoint(
        f"e{index}", "r", f"10.0.0.{index}:80", profile.name, gpus, models, admin_state=state
    )
    slots = profile.max_concurrency * gpus
    running = draw(st.integers(0, 2 * slots))
    floats = st.floats(0, 1e7, allow_nan=False)
    return EndpointLoad(
        endpoint,
        profile,
        healthy=draw(st.booleans()),
        running=running,
        waiting=draw(st.integers(0, 3 * slots)),
        outstanding_prefill_tokens=draw(floats),
        outstanding_decode_tokens=draw(floats),
        kv_cache_usage=draw(st.floats(0, 1)),
        gpu_util=draw(st.floats(0, 1)),
        latency_ewma_ms=draw(st.floats(0, 1e5)),
        cached_prefixes=frozenset(draw(st.lists(st.integers(0, 20), max_size=10))),
    )


@st.composite
def candidate_sets(draw: st.DrawFn, max_size: int = 12) -> tuple[EndpointLoad, ...]:
    n = draw(st.integers(0, max_size))
    return tuple(draw(endpoint_loads(i)) for i in range(n))


requests = st.builds(
    Request,
    model=st.sampled_from(MODELS),
    client=st.just(ClientLocation("DE", "EU")),
    input_tokens=st.integers(1, 200_000),
    max_output_tokens=st.integers(0, 8192),
    priority=st.sampled_from(tuple(Priority)),
    prefix_hashes=st.lists(st.integers(0, 20), max_size=12).map(tuple),
)


def _check(
    picker: Picker, request: Request, loads: tuple[EndpointLoad, ...], picks: int = 3
) -> None:
    name = picker.name
    eligible = {c.endpoint.name for c in loads if serves(c, request.model)}
    for _ in range(picks):
        pick = picker.pick(request, loads, 0.0)
        assert pick.reason
        assert pick.expected_output_tokens >= 0
        if pick.endpoint is None:
            shed = request.priority is Priority.BATCH and name == "ai_aware"
            assert not eligible or (shed and "shed" in pick.reason)
        else:
            assert pick.endpoint in eligible
            chosen = next(c for c in loads if c.endpoint.name == pick.endpoint)
            assert request.model in chosen.endpoint.models
            assert chosen.healthy and chosen.endpoint.admin_state is AdminState.ACTIVE


@pytest.mark.parametrize("name", STRATEGIES)
@settings(max_examples=100, deadline=None)
@given(request=requests, loads=candidate_sets())
def test_a_pick_serves_the_model_or_is_none_with_a_reason(
    name: str, request: Request, loads: tuple[EndpointLoad, ...]
) -> None:
    _check(make_picker(name, seed=0), request, loads)


@settings(max_examples=20, deadline=None)
@given(request=requests, loads=candidate_sets(max_size=50))
def test_the_sampling_path_keeps_the_invariant(
    request: Request, loads: tuple[EndpointLoad, ...]
) -> None:
    _check(AiAwarePicker(seed=0, exact_limit=3, sample_size=2), request, loads, picks=5)


@settings(max_examples=100, deadline=None)
@given(request=requests, loads=candidate_sets())
def test_interactive_requests_are_never_shed(
    request: Request, loads: tuple[EndpointLoad, ...]
) -> None:
    interactive = replace(request, priority=Priority.INTERACTIVE)
    pick = make_picker("ai_aware").pick(interactive, loads, 0.0)
    assert (pick.endpoint is None) == (not any(serves(c, request.model) for c in loads))


@settings(max_examples=300, deadline=None)
@given(loads=candidate_sets(), request=requests)
def test_ai_aware_picks_the_earliest_completion_or_a_less_busy_one_within_its_slack(
    loads: tuple[EndpointLoad, ...], request: Request
) -> None:
    from trafficmgr.routing.estimator import cost_terms, service_rates
    from trafficmgr.routing.picker import outstanding_work_s

    interactive = Request(
        request.model,
        request.client,
        request.input_tokens,
        request.max_output_tokens,
        Priority.INTERACTIVE,
    )
    picker = make_picker("ai_aware")
    pick = picker.pick(interactive, loads, 0.0)
    if pick.endpoint is None:
        return
    exp = pick.expected_output_tokens

    def cost(c: EndpointLoad) -> tuple[float, float]:
        """Return (expected completion, own service) of the request at ``c``."""
        terms = cost_terms(
            service_rates(c.profile, c.endpoint.gpus),
            c.running,
            c.waiting,
            c.outstanding_prefill_tokens,
            c.outstanding_decode_tokens,
            c.kv_cache_usage,
            c.gpu_util,
        )
        done = terms.completion_s(request.input_tokens, exp)
        return done, done - terms.wait_s

    serving = [c for c in loads if serves(c, request.model)]
    best = min(cost(c)[0] for c in serving)
    chosen = next(c for c in loads if c.endpoint.name == pick.endpoint)
    done = cost(chosen)[0]
    assert pick.expected_latency_s == pytest.approx(done, rel=1e-9)
    if done == pytest.approx(best, rel=1e-12):
        return
    # moved off a cheapest endpoint: no later than its queue and its own service allow,
    # and to an endpoint with less work in flight
    cheapest = [c for c in serving if cost(c)[0] == pytest.approx(best, rel=1e-12)]
    assert any(
        done <= best + min(best - cost(c)[1], cost(c)[1]) + 1e-9
        and outstanding_work_s(chosen) < outstanding_work_s(c)
        for c in cheapest
    )


@settings(max_examples=100, deadline=None)
@given(loads=candidate_sets(), request=requests)
def test_ai_aware_without_queues_picks_the_earliest_completion(
    loads: tuple[EndpointLoad, ...], request: Request
) -> None:
    idle = tuple(
        EndpointLoad(
            c.endpoint,
            c.profile,
            healthy=c.healthy,
            running=min(c.running, c.profile.max_concurrency * c.endpoint.gpus // 2),
            outstanding_decode_tokens=c.outstanding_decode_tokens,
            gpu_util=c.gpu_util,
            cached_prefixes=c.cached_prefixes,
        )
        for c in loads
    )
    interactive = Request(
        request.model, request.client, request.input_tokens, request.max_output_tokens
    )
    pick = make_picker("ai_aware").pick(interactive, idle, 0.0)
    assert "work-conserving" not in pick.reason


@settings(max_examples=200, deadline=None)
@given(
    loads=candidate_sets(),
    request=requests,
    p99_s=st.floats(0.01, 100.0),
    long=st.integers(0, 20_000),
    history=st.lists(st.tuples(st.integers(0, 12), st.floats(0, 120.0)), max_size=6),
)
def test_a_balanced_pick_completes_even_a_long_answer_within_the_p99_on_a_less_used_endpoint(
    loads: tuple[EndpointLoad, ...],
    request: Request,
    p99_s: float,
    long: int,
    history: list[tuple[int, float]],
) -> None:
    """Whatever the loads, the tail and the work sent before: a pick the balancing rule made
    is eligible, was less used than the earliest-completion endpoint, and is expected to
    complete the request within the tail with the estimator's long answer."""
    from trafficmgr.routing.picker import TAIL_MIN_SAMPLES

    picker = AiAwarePicker(seed=0)
    for _ in range(TAIL_MIN_SAMPLES):
        picker.observe(request.model, long, input_tokens=request.input_tokens, latency_s=p99_s)
    serving = [c for c in loads if serves(c, request.model)]
    for index, at in history:  # some work sent earlier, to some of them
        if serving:
            other = Request(request.model, request.client, 1000, 0)
            picker.pick(other, tuple(serving[index % len(serving) :]), at)
    interactive = replace(request, priority=Priority.INTERACTIVE)
    pick = picker.pick(interactive, loads, 130.0)
    _check(picker, interactive, loads, picks=1)
    if pick.endpoint is None or "balanced" not in pick.reason:
        return
    budget = picker.tail.quantile_s(0.99)
    assert f"P99 ({budget * 1000:.0f} ms)" in pick.reason
    assert pick.expected_latency_s <= budget + 1e-9  # expected answer <= the long one
