"""Per-request endpoint picker inside one region (docs/engine-interfaces.md).

Every strategy first keeps the candidates that may serve the request: healthy, active and
serving the request's model. A pick is always one of those, or ``None`` with the reason.

The strategies: ``round_robin``, ``least_connections``, ``weighted`` (smooth weighted round
robin by weight x decode capacity), ``latency`` (lowest EWMA of observed latency),
``least_outstanding_work`` (estimated work in flight over speed), all here, and ``ai_aware``,
the default, in ``ai_aware.py`` (earliest expected completion, work-conserving, balancing
within the service's latency tail). The shared parts are in ``pickbase.py``; this module
re-exports them.
"""

from __future__ import annotations

from trafficmgr.routing.ai_aware import (
    PREFIX_INDEX_SIZE,
    TAIL_MIN_SAMPLES,
    AiAwarePicker,
    cached_tokens,
)
from trafficmgr.routing.estimator import LatencyTail, OutputLengthEstimator
from trafficmgr.routing.pickbase import (
    EndpointLoad,
    Pick,
    Picker,
    Strategy,
    outstanding_work_s,
    rates_of,
    serves,
)
from trafficmgr.routing.types import Request

__all__ = [
    "DEFAULT_STRATEGY",
    "PREFIX_INDEX_SIZE",
    "STRATEGIES",
    "TAIL_MIN_SAMPLES",
    "AiAwarePicker",
    "EndpointLoad",
    "LatencyPicker",
    "LeastConnectionsPicker",
    "LeastOutstandingWorkPicker",
    "Pick",
    "Picker",
    "RoundRobinPicker",
    "WeightedPicker",
    "cached_tokens",
    "make_picker",
    "outstanding_work_s",
    "serves",
]


class RoundRobinPicker(Strategy):
    name = "round_robin"

    def __init__(self, seed: int = 0, estimator: OutputLengthEstimator | None = None) -> None:
        super().__init__(seed, estimator)
        self._turns: dict[str, int] = {}  # per model, so models do not disturb each other

    def choose(self, request: Request, eligible: list[EndpointLoad], exp: float) -> Pick:
        turn = self._turns.get(request.model, 0)
        self._turns[request.model] = turn + 1
        load = eligible[turn % len(eligible)]
        return Pick(
            load.endpoint.name,
            f"round_robin: turn {turn} of {len(eligible)} endpoints serving {request.model}",
            exp,
        )


class LeastConnectionsPicker(Strategy):
    name = "least_connections"

    def choose(self, request: Request, eligible: list[EndpointLoad], exp: float) -> Pick:
        load = min(self._rotated(eligible), key=lambda c: c.running + c.waiting)
        return Pick(
            load.endpoint.name,
            f"least_connections: {load.running + load.waiting} "
            f"in flight, fewest of {len(eligible)}",
            exp,
        )


class WeightedPicker(Strategy):
    """Smooth weighted round robin (nginx) by configured weight x decode capacity."""

    name = "weighted"

    def __init__(self, seed: int = 0, estimator: OutputLengthEstimator | None = None) -> None:
        super().__init__(seed, estimator)
        self._current: dict[str, float] = {}

    def choose(self, request: Request, eligible: list[EndpointLoad], exp: float) -> Pick:
        weights = [c.endpoint.weight * rates_of(c).decode_tokens_per_s for c in eligible]
        total = sum(weights)
        if total <= 0:
            weights, total = [1.0] * len(eligible), float(len(eligible))
        best, best_value = eligible[0], -float("inf")
        for load, w in zip(eligible, weights, strict=True):
            value = self._current.get(load.endpoint.name, 0.0) + w
            self._current[load.endpoint.name] = value
            if value > best_value:
                best, best_value = load, value
        self._current[best.endpoint.name] = best_value - total
        share = weights[eligible.index(best)] / total
        return Pick(best.endpoint.name, f"weighted: {share:.0%} share of {len(eligible)}", exp)


class LatencyPicker(Strategy):
    """Lowest EWMA of observed latency; endpoints never observed are tried first."""

    name = "latency"

    def choose(self, request: Request, eligible: list[EndpointLoad], exp: float) -> Pick:
        load = min(self._rotated(eligible), key=lambda c: c.latency_ewma_ms)
        if load.latency_ewma_ms <= 0:
            return Pick(load.endpoint.name, "latency: no latency observed yet, exploring", exp)
        return Pick(
            load.endpoint.name,
            f"latency: EWMA {load.latency_ewma_ms:.0f} ms, lowest of {len(eligible)}",
            exp,
        )


class LeastOutstandingWorkPicker(Strategy):
    """Least estimated prefill + decode work in flight, in seconds at the endpoint's speed."""

    name = "least_outstanding_work"

    def choose(self, request: Request, eligible: list[EndpointLoad], exp: float) -> Pick:
        load = min(self._rotated(eligible), key=outstanding_work_s)
        return Pick(
            load.endpoint.name,
            f"least_outstanding_work: {outstanding_work_s(load) * 1000:.0f} ms of work in flight",
            exp,
        )


_STRATEGIES: dict[str, type[Strategy] | type[AiAwarePicker]] = {
    "round_robin": RoundRobinPicker,
    "least_connections": LeastConnectionsPicker,
    "weighted": WeightedPicker,
    "latency": LatencyPicker,
    "least_outstanding_work": LeastOutstandingWorkPicker,
    "ai_aware": AiAwarePicker,
}
STRATEGIES: tuple[str, ...] = tuple(_STRATEGIES)
DEFAULT_STRATEGY = "ai_aware"


def make_picker(
    name: str = DEFAULT_STRATEGY,
    *,
    seed: int = 0,
    estimator: OutputLengthEstimator | None = None,
    tail: LatencyTail | None = None,
) -> Picker:
    """Build a picker by strategy name; raise ValueError naming the known ones.

    Pickers of several regions may share one ``estimator`` and one latency ``tail`` (the
    caller serialises their use); only ``ai_aware`` reads the tail.
    """
    try:
        cls = _STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown picker {name!r} (known: {', '.join(STRATEGIES)})") from None
    if cls is AiAwarePicker:
        return AiAwarePicker(seed=seed, estimator=estimator, tail=tail)
    return cls(seed=seed, estimator=estimator)
