"""In-flight accounting: what the picker sees grows with each request and returns to zero."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.gateway.world import US_IP, world_fleet
from tests.requestpath.conftest import ask, plan
from trafficmgr.requestpath import Outcome, RequestPath, StaticSource, Usage
from trafficmgr.routing.types import ClientLocation


def test_a_request_counts_prefill_then_decode_then_nothing(make_core: Callable) -> None:
    core, _ = make_core(default_strategy="round_robin")
    got = plan(core.decide(ask(client_ip=US_IP, prompt="word " * 100, max_output_tokens=50)))
    name = got.targets[0].name
    flight = core.ledger.get(name)
    assert flight is not None
    assert (flight.running, flight.prefill) == (1, 100)
    assert 0 < flight.decode <= 50
    core.served(got.handle, name)
    core.progress(got.handle, 10)
    assert flight.prefill == 0 and flight.decode <= 40
    core.finished(got.handle, Usage(100, 12), Outcome.OK)
    assert (flight.running, flight.prefill, flight.decode) == (0, 0.0, 0.0)
    core.finished(got.handle, None, Outcome.OK)  # twice: harmless
    assert core.ledger.total == 0


def test_a_retry_moves_the_request_to_the_fallback(make_core: Callable) -> None:
    core, _ = make_core()
    got = plan(core.decide(ask(client_ip=US_IP)))
    first, second = got.targets[0].name, got.targets[1].name
    core.attempt_failed(got.handle, Outcome.CONNECT_ERROR)
    assert core.in_flight()[first] == 0
    core.served(got.handle, got.targets[1].address)  # an address works as well as a name
    assert core.in_flight()[second] == 1
    core.finished(got.handle, None, Outcome.CANCELLED)
    assert core.ledger.total == 0


@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_outcome_closes_the_accounting(make_core: Callable, outcome: Outcome) -> None:
    core, _ = make_core()
    got = plan(core.decide(ask(client_ip=US_IP)))
    core.progress(got.handle, 3)
    core.finished(got.handle, None, outcome)
    assert core.ledger.total == 0
    assert all(v == 0 for v in core.in_flight().values())


def test_in_flight_work_steers_the_next_pick(make_core: Callable) -> None:
    core, _ = make_core(default_strategy="least_outstanding_work")
    first = plan(core.decide(ask(client_ip=US_IP, prompt="w " * 4000, max_output_tokens=500)))
    second = plan(core.decide(ask(client_ip=US_IP)))
    assert second.targets[0].name != first.targets[0].name


def test_completions_are_observed_and_reported(make_core: Callable) -> None:
    core, source = make_core()
    for _ in range(3):
        got = plan(core.decide(ask(client_ip=US_IP, prompt="a b c", max_output_tokens=9)))
        core.served(got.handle, got.targets[0].name)
        core.progress(got.handle, 7)
        core.finished(got.handle, Usage(3, 7), Outcome.OK)
    failed = plan(core.decide(ask(client_ip=US_IP)))
    core.finished(failed.handle, None, Outcome.SERVER_ERROR)  # not a completion
    assert core.learner.estimator.count("m1") == 3
    core.maintain()
    reported = list(source.reported)
    assert len(reported) == 3
    assert {(c.model, c.input_tokens, c.output_tokens) for c in reported} == {("m1", 3, 7)}
    assert all(c.latency_s > 0 and len(c.prefix_hashes) == 1 for c in reported)


def test_own_reports_coming_back_from_the_stream_are_not_learned_twice(
    make_core: Callable,
) -> None:
    core, _ = make_core()
    got = plan(core.decide(ask(client_ip=US_IP)))
    core.finished(got.handle, Usage(2, 5), Outcome.OK)
    (mine,) = core.learner.drain_reports()
    other = type(mine)("use-1", "m1", 10, 40, 0.5, ())
    core.learner.learn_stream("us-east", [("1-0", mine), ("2-0", other), ("2-0", other)])
    assert core.learner.estimator.count("m1") == 2  # own once (in process), other once


def test_warm_does_the_source_set_up_off_the_request_path() -> None:
    asked: list[str] = []

    def locate(ip: str) -> ClientLocation:
        asked.append(ip)
        return ClientLocation()

    core = RequestPath(StaticSource(world_fleet(), locate=locate))
    core.warm()  # e.g. the GeoIP database opens here, not on the first request
    assert asked == ["127.0.0.1"]
