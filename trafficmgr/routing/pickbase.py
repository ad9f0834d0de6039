"""What every picker strategy shares: the live view of an endpoint, a pick, eligibility.

Every strategy first keeps the candidates that may serve the request: healthy, active,
weighted above 0 and serving the request's model. A pick is always one of those, or ``None``
with the reason.

The strategies are in ``picker.py`` (the simple ones and ``make_picker``) and
``ai_aware.py`` (the default).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from trafficmgr.routing.estimator import OutputLengthEstimator, ServiceRates, service_rates
from trafficmgr.routing.types import AdminState, Endpoint, GpuProfile, Request
from trafficmgr.routing.values import value


@value
class EndpointLoad:
    """Live view of one endpoint for the picker."""

    endpoint: Endpoint
    profile: GpuProfile
    healthy: bool = True
    running: int = 0  # requests in flight
    waiting: int = 0
    outstanding_prefill_tokens: float = 0.0
    outstanding_decode_tokens: float = 0.0
    kv_cache_usage: float = 0.0
    gpu_util: float = 0.0
    latency_ewma_ms: float = 0.0
    cached_prefixes: frozenset[int] = frozenset()


@value
class Pick:
    endpoint: str | None  # None: no endpoint can take it
    reason: str
    expected_output_tokens: float
    expected_latency_s: float = 0.0  # the picker's estimate, 0 when it makes none


class Picker(Protocol):
    name: str

    def pick(self, request: Request, candidates: Sequence[EndpointLoad], now: float) -> Pick: ...

    def observe(
        self,
        model: str,
        output_tokens: int,
        *,
        input_tokens: int = 0,
        prefix_hashes: Sequence[int] = (),
        latency_s: float | None = None,
    ) -> None: ...


def serves(load: EndpointLoad, model: str) -> bool:
    """Tell whether an endpoint may take a request for ``model`` now (weight 0: never)."""
    e = load.endpoint
    return (
        load.healthy and e.admin_state is AdminState.ACTIVE and e.weight > 0 and model in e.models
    )


def refusal(name: str, request: Request, candidates: Sequence[EndpointLoad], exp: float) -> Pick:
    serving = [c for c in candidates if request.model in c.endpoint.models]
    if not serving:
        why = f"no endpoint serves {request.model}"
    else:
        why = (
            f"none of the {len(serving)} endpoints serving {request.model} is healthy and "
            "active with a weight above 0"
        )
    return Pick(None, f"{name}: {why}", exp)


class Strategy:
    """Shared parts: eligibility, the output-length estimator, refusals."""

    name = "base"

    def __init__(self, seed: int = 0, estimator: OutputLengthEstimator | None = None) -> None:
        self.rng = random.Random(seed)
        self.estimator = estimator or OutputLengthEstimator()
        self._turn = 0

    def observe(
        self,
        model: str,
        output_tokens: int,
        *,
        input_tokens: int = 0,
        prefix_hashes: Sequence[int] = (),
        latency_s: float | None = None,
    ) -> None:
        """Learn from a completed request: its output length, and what its prompt was."""
        self.estimator.observe(
            model, output_tokens, input_tokens=input_tokens, prefix_hashes=prefix_hashes
        )

    def pick(self, request: Request, candidates: Sequence[EndpointLoad], now: float) -> Pick:
        exp = self.estimator.expected(request.model, request.max_output_tokens)
        eligible = [c for c in candidates if serves(c, request.model)]
        if not eligible:
            return refusal(self.name, request, candidates, exp)
        self._turn += 1
        return self.choose(request, eligible, exp)

    def choose(self, request: Request, eligible: list[EndpointLoad], exp: float) -> Pick:
        raise NotImplementedError

    def _rotated(self, eligible: list[EndpointLoad]) -> list[EndpointLoad]:
        """Rotate the list each pick so ties do not always go to the first endpoint."""
        k = self._turn % len(eligible)
        return eligible[k:] + eligible[:k]


def rates_of(load: EndpointLoad) -> ServiceRates:
    return service_rates(load.profile, load.endpoint.gpus)


def outstanding_work_s(load: EndpointLoad) -> float:
    """Return the seconds of full-speed GPU work an endpoint has in flight."""
    r = rates_of(load)
    return r.work_s(load.outstanding_prefill_tokens, load.outstanding_decode_tokens)
