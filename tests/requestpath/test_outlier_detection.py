"""Outlier ejection like Envoy's: consecutive failures, growing ejection, bounded share,
half-open probes; client errors never trip it; slow start after a return."""

from __future__ import annotations

from collections.abc import Callable

from tests.gateway.world import EU_IP, US_IP
from tests.requestpath.conftest import ManualClock, ask, plan
from trafficmgr.requestpath import Outcome, RequestPath
from trafficmgr.requestpath.outlier import EjectionPolicy, OutlierDetector


def fail_on(core: RequestPath, name: str, outcome: Outcome, times: int) -> None:
    for _ in range(times):
        got = plan(core.decide(ask(client_ip=US_IP, subset=frozenset({name}))))
        core.finished(got.handle, None, outcome)


def test_consecutive_failures_eject_then_a_probe_brings_it_back(
    make_core: Callable, clock: ManualClock
) -> None:
    core, _ = make_core(consecutive_failures=3, base_ejection_s=10)
    fail_on(core, "use-1", Outcome.SERVER_ERROR, 3)
    assert core.outlier.ejected("use-1", clock())
    for _ in range(20):
        got = plan(core.decide(ask(client_ip=US_IP)))
        assert "use-1" not in {t.name for t in got.targets}
        core.finished(got.handle, None, Outcome.OK)
    clock.advance(10.5)  # half-open: exactly one probe at a time
    probe = plan(core.decide(ask(client_ip=US_IP, subset=frozenset({"use-1"}))))
    again = core.decide(ask(client_ip=US_IP, subset=frozenset({"use-1"})))
    assert not hasattr(again, "targets")
    core.progress(probe.handle, 1)  # the first byte vouches for it
    assert not core.outlier.ejected("use-1", clock())
    assert core.outlier.available("use-1", clock())
    core.finished(probe.handle, None, Outcome.OK)


def test_a_failed_probe_ejects_for_longer(make_core: Callable, clock: ManualClock) -> None:
    core, _ = make_core(consecutive_failures=2, base_ejection_s=10)
    fail_on(core, "use-2", Outcome.TIMEOUT, 2)
    clock.advance(10.1)
    fail_on(core, "use-2", Outcome.CONNECT_ERROR, 1)  # the probe fails
    clock.advance(15)
    assert core.outlier.ejected("use-2", clock())  # second ejection: 20 s
    clock.advance(5.1)
    assert core.outlier.half_open("use-2", clock())


def test_client_errors_throttling_and_cancellations_never_eject(
    make_core: Callable, clock: ManualClock
) -> None:
    core, _ = make_core(consecutive_failures=2)
    for outcome in (Outcome.CLIENT_ERROR, Outcome.THROTTLED, Outcome.CANCELLED):
        fail_on(core, "use-1", outcome, 10)
    assert not core.outlier.ejected("use-1", clock())
    fail_on(core, "use-1", Outcome.SERVER_ERROR, 1)
    fail_on(core, "use-1", Outcome.CLIENT_ERROR, 1)  # an answer: the count starts again
    fail_on(core, "use-1", Outcome.SERVER_ERROR, 1)
    assert not core.outlier.ejected("use-1", clock())


def test_at_most_a_bounded_share_of_a_pool_is_ejected(make_core: Callable) -> None:
    core, _ = make_core(consecutive_failures=1, max_ejected_share=0.5)
    for name in ("euw-1", "euw-2", "euc-1"):  # the pool: all five endpoints in scope
        got = plan(core.decide(ask(client_ip=EU_IP, subset=frozenset({name}))))
        core.finished(got.handle, None, Outcome.SERVER_ERROR)
    assert core.outlier.ejected_names() == ["euw-1", "euw-2"]  # floor(5 x 0.5)
    assert plan(core.decide(ask(client_ip=EU_IP))).targets[0].name == "euc-1"


def test_ejection_time_grows_and_is_capped() -> None:
    detector = OutlierDetector(EjectionPolicy(consecutive=1, base_s=10, longest_s=25))
    now, spans = 0.0, []
    detector.failed("a", now)
    for _ in range(4):
        start = now
        while detector.ejected("a", now):
            now += 0.5
        spans.append(now - start)
        assert detector.half_open("a", now)
        assert detector.sent("a", now)  # the probe
        assert not detector.available("a", now)  # one at a time
        detector.failed("a", now)  # ... and it fails
    assert spans == [10, 20, 25, 25]


def test_slow_start_ramps_a_returning_endpoint(make_core: Callable, clock: ManualClock) -> None:
    core, _ = make_core(slow_start_s=100, slow_start_floor=0.1, default_strategy="round_robin")
    core.undrain("use-1")  # not drained: nothing to do
    core.drain("use-1")
    core.undrain("use-1")  # back: ramps from 10 %

    def share() -> float:
        hits = 0
        for _ in range(400):
            got = plan(core.decide(ask(client_ip=US_IP)))
            hits += got.targets[0].name == "use-1"
            core.finished(got.handle, None, Outcome.OK)
        return hits / 400

    early = share()
    clock.advance(50)
    middle = share()
    clock.advance(60)
    late = share()
    assert early < 0.15 and 0.15 < middle < 0.4 and late > 0.4
