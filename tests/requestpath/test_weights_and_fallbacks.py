"""Endpoint weight 0 and drain take no new requests; a model's fallback chain is followed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tests.gateway.world import US_IP
from tests.requestpath.conftest import ask, plan
from trafficmgr.requestpath import Outcome, Refusal
from trafficmgr.routing.types import Fleet


def _weighted(fleet: Fleet, name: str, weight: float) -> Fleet:
    regions = tuple(
        replace(
            r,
            endpoints=tuple(
                replace(e, weight=weight) if e.name == name else e for e in r.endpoints
            ),
        )
        for r in fleet.regions
    )
    return replace(fleet, regions=regions)


def test_weight_zero_takes_no_request(fleet: Fleet, make_core: Callable) -> None:
    core, _ = make_core(_weighted(fleet, "use-1", 0.0), max_targets=10)
    for strategy in ("ai_aware", "round_robin", "least_connections"):
        for _ in range(30):
            got = plan(core.decide(ask(client_ip=US_IP, strategy=strategy)))
            assert "use-1" not in {t.name for t in got.targets}
            core.finished(got.handle, None, Outcome.OK)


def test_weighted_strategy_honours_weights(fleet: Fleet, make_core: Callable) -> None:
    core, _ = make_core(_weighted(fleet, "use-1", 3.0), region="us-east")
    counts = {"use-1": 0, "use-2": 0}
    for _ in range(400):
        got = plan(core.decide(ask(client_ip=US_IP, strategy="weighted")))
        counts[got.targets[0].name] += 1
        core.finished(got.handle, None, Outcome.OK)
    assert counts == {"use-1": 300, "use-2": 100}


def test_drained_endpoint_lets_in_flight_finish(make_core: Callable) -> None:
    core, _ = make_core(region="us-east", default_strategy="round_robin")
    first = plan(core.decide(ask(client_ip=US_IP)))
    core.drain(first.targets[0].name)
    for _ in range(10):
        got = plan(core.decide(ask(client_ip=US_IP)))
        assert got.targets == got.targets[:1] and got.targets[0].name != first.targets[0].name
        core.finished(got.handle, None, Outcome.OK)
    core.progress(first.handle, 4)
    core.finished(first.handle, None, Outcome.OK)
    assert core.ledger.total == 0


def test_model_fallback_chain(make_core: Callable) -> None:
    core, _ = make_core(region="us-east", model_fallbacks={"m2": ("m1",)})
    core.drain("use-1")  # the only m2 endpoint in us-east
    got = plan(core.decide(ask("m2", client_ip=US_IP)))
    assert got.model == "m1" and got.targets[0].name == "use-2"
    assert got.reason.startswith("model fallback m2 -> m1")
    core.finished(got.handle, None, Outcome.OK)
    plain, _ = make_core(region="us-east")
    plain.drain("use-1")
    assert isinstance(plain.decide(ask("m2", client_ip=US_IP)), Refusal)
