"""Admission: 429 with Retry-After when saturated, a bounded wait, batch shed first;
503 when nothing is eligible; unknown strategy or priority refused naming the header."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.gateway.world import US_IP
from tests.requestpath.conftest import ask, plan
from trafficmgr.requestpath import Outcome, Plan, Refusal
from trafficmgr.routing.picker import STRATEGIES

# H100 x1 serves 64 at once; max_load 1.5 admits 96 per endpoint, batch 0.8 admits 51.2


def fill(core, count: int, priority: str = "interactive") -> list[Plan]:  # type: ignore[no-untyped-def]
    return [plan(core.decide(ask(client_ip=US_IP, priority=priority))) for _ in range(count)]


def test_saturation_is_429_with_retry_after(make_core: Callable) -> None:
    core, _ = make_core(region="us-east")
    held = fill(core, 2 * 96)
    refused = core.decide(ask(client_ip=US_IP))
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.code, refused.retry_after_s) == (429, "saturated", 1)
    for p in held:
        core.finished(p.handle, None, Outcome.OK)
    assert isinstance(core.decide(ask(client_ip=US_IP)), Plan)


def test_batch_is_refused_before_interactive(make_core: Callable) -> None:
    core, _ = make_core(region="us-east")
    fill(core, 2 * 52)
    batch = core.decide(ask(client_ip=US_IP, priority="batch"))
    assert isinstance(batch, Refusal) and batch.status == 429
    assert isinstance(core.decide(ask(client_ip=US_IP)), Plan)


def test_a_waiting_request_is_admitted_when_a_slot_frees(make_core: Callable) -> None:
    core, _ = make_core(region="us-east", interactive_wait_s=5)

    async def scenario() -> tuple[Plan | Refusal, float]:
        held = fill(core, 2 * 96)
        waiter = asyncio.create_task(core.admit(ask(client_ip=US_IP)))
        await asyncio.sleep(0.05)
        assert core.queue.depth() == 1
        core.finished(held[0].handle, None, Outcome.OK)
        result = await asyncio.wait_for(waiter, 2)
        return result, core.queue.depth()

    result, depth = asyncio.run(scenario())
    assert isinstance(result, Plan) and depth == 0


def test_a_full_queue_sheds_batch_for_interactive(make_core: Callable) -> None:
    core, _ = make_core(region="us-east", queue_limit=1, batch_wait_s=5, interactive_wait_s=0.2)

    async def scenario() -> tuple[Plan | Refusal, Plan | Refusal]:
        fill(core, 2 * 96)
        batch = asyncio.create_task(core.admit(ask(client_ip=US_IP, priority="batch")))
        await asyncio.sleep(0.05)
        interactive = asyncio.create_task(core.admit(ask(client_ip=US_IP)))
        return await batch, await interactive

    batch, interactive = asyncio.run(scenario())
    assert isinstance(batch, Refusal) and batch.status == 429
    assert isinstance(interactive, Refusal) and "waited" in interactive.message


def test_nothing_eligible_is_503(make_core: Callable) -> None:
    core, _ = make_core(region="us-east")
    core.drain("use-1")
    core.drain("use-2")
    refused = core.decide(ask(client_ip=US_IP))
    assert isinstance(refused, Refusal) and refused.status == 503 and refused.retry_after_s


def test_unknown_model_is_404(make_core: Callable) -> None:
    core, _ = make_core()
    refused = core.decide(ask("no-such-model"))
    assert isinstance(refused, Refusal) and (refused.status, refused.code) == (
        404,
        "model_not_found",
    )


@pytest.mark.parametrize("header", ["strategy", "priority"])
def test_unknown_header_values_are_400_naming_the_header(make_core: Callable, header: str) -> None:
    core, _ = make_core()
    refused = core.decide(ask(**{header: "bogus"}))
    assert isinstance(refused, Refusal) and refused.status == 400
    assert refused.param == f"x-trafficmgr-{header}"
    assert f"x-trafficmgr-{header}" in refused.message


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_engine_strategy_routes(make_core: Callable, strategy: str) -> None:
    core, _ = make_core()
    got = plan(core.decide(ask(client_ip=US_IP, strategy=strategy)))
    assert strategy in got.reason
    core.finished(got.handle, None, Outcome.OK)
