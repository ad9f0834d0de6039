"""Turn a trace and a fleet into the simulated workload: who asks what, for which model, when.

- Load. The fleet's capacity is estimated as ``sum over active endpoints of 1 / (mean input /
  prefill rate + mean output / decode rate)`` requests/s (full-batch rates of the service
  model, no prefix-cache savings, any request on any endpoint). ``load`` rescales the trace's
  arrival times so the offered rate is that fraction of it; the trace's burstiness is kept.
- Clients. Each request comes from a country drawn from ``fleet.clients`` shares (each region's
  country equally when the fleet names none), and through one of ``resolvers`` DNS resolvers
  of that country, whose cache is shared by their clients.
- Models. A trace model name equal to a fleet model is kept; other names are mapped, in sorted
  order, onto the fleet's models by share. A request without a model gets one drawn in the
  proportions the fleet was built for: each endpoint's capacity split evenly among its
  models.
- Output limits. ``max_output_tokens`` is ``MAX_OUTPUT_TOKENS``; longer true outputs are cut
  to it, as a server would.

Everything is drawn from one ``random.Random(seed)``, so a seed gives the same workload to
every policy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from trafficmgr.routing.draw import cumulative, draw_index
from trafficmgr.routing.estimator import service_rates
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.types import AdminState, Fleet, Priority, Request
from trafficmgr.sim.traces import Trace

MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class SimRequest:
    send_at: float  # when the client sends it (simulation seconds)
    request: Request  # what the engine sees
    output_tokens: int  # the true output length: for the servers and the oracle only
    country: str
    resolver: int


@dataclass(frozen=True, slots=True)
class Workload:
    requests: tuple[SimRequest, ...]
    time_scale: float  # simulated seconds per trace second
    capacity_rps: float
    offered_rps: float
    model_shares: dict[str, float]
    # per active endpoint: its share of ``capacity_rps`` (requests/s at full batch)
    endpoint_capacity_rps: dict[str, float] = field(default_factory=dict)

    @property
    def load(self) -> float:
        return self.offered_rps / self.capacity_rps if self.capacity_rps > 0 else 0.0


def active_endpoints(fleet: Fleet) -> list[tuple[str, int, float, float]]:
    """Return (name, models served, prefill tokens/s, decode tokens/s) of serving endpoints."""
    out = []
    for region in fleet.regions:
        if region.admin_state is not AdminState.ACTIVE:
            continue
        for e in region.endpoints:
            profile = fleet.gpu_profiles.get(e.gpu)
            if e.admin_state is AdminState.ACTIVE and profile is not None:
                rates = service_rates(profile, e.gpus)
                out.append(
                    (e.name, len(e.models), rates.prefill_tokens_per_s, rates.decode_tokens_per_s)
                )
    return out


def endpoint_capacity_rps(fleet: Fleet, mean_input: float, mean_output: float) -> dict[str, float]:
    """Return each serving endpoint's requests/s at full batch (see the module docstring)."""
    return {
        name: 1.0 / (mean_input / prefill + mean_output / decode)
        for name, _, prefill, decode in active_endpoints(fleet)
    }


def capacity_rps(fleet: Fleet, mean_input: float, mean_output: float) -> float:
    """Estimate the requests/s the fleet serves at full batch (see the module docstring)."""
    return sum(endpoint_capacity_rps(fleet, mean_input, mean_output).values())


def model_shares(fleet: Fleet) -> dict[str, float]:
    """Return each model's share of traffic: every endpoint splits its capacity evenly."""
    shares: dict[str, float] = {}
    for region in fleet.regions:
        for e in region.endpoints:
            profile = fleet.gpu_profiles.get(e.gpu)
            if profile is None or e.admin_state is not AdminState.ACTIVE or not e.models:
                continue
            cap = profile.decode_tokens_per_s * e.gpus / len(e.models)
            for m in e.models:
                shares[m] = shares.get(m, 0.0) + cap
    total = sum(shares.values()) or 1.0
    return {m: s / total for m, s in sorted(shares.items())}


def build_workload(
    fleet: Fleet,
    trace: Trace,
    load: float | None,
    seed: int,
    resolvers: int = 32,
    batch_share: float = 0.0,
) -> Workload:
    """Build the simulated requests of one run."""
    reqs = trace.requests
    mean_in = sum(r.input_tokens for r in reqs) / len(reqs)
    mean_out = sum(min(r.output_tokens, MAX_OUTPUT_TOKENS) for r in reqs) / len(reqs)
    per_endpoint = endpoint_capacity_rps(fleet, mean_in, max(1.0, mean_out))
    capacity = sum(per_endpoint.values())
    native_rps = (len(reqs) - 1) / trace.duration_s if trace.duration_s > 0 else 0.0
    scale = 1.0
    if load is not None and native_rps > 0 and capacity > 0:
        scale = native_rps / (load * capacity)
    offered = native_rps / scale if native_rps > 0 else 0.0
    shares = model_shares(fleet)
    rng = random.Random(seed)
    countries, weights = _client_mix(fleet)
    names, cum = list(shares), cumulative(shares.values())
    mapping = _model_mapping(trace, names, shares)
    out = []
    for r in reqs:
        country = rng.choices(countries, weights)[0]
        model = mapping.get(r.model or "") or names[draw_index(cum, rng.random())]
        priority = Priority.BATCH if rng.random() < batch_share else Priority.INTERACTIVE
        request = Request(
            model,
            country_location(country),
            r.input_tokens,
            MAX_OUTPUT_TOKENS,
            priority,
            r.prefix_hashes,
        )
        out.append(
            SimRequest(
                r.at * scale,
                request,
                min(r.output_tokens, MAX_OUTPUT_TOKENS),
                country,
                rng.randrange(max(1, resolvers)),
            )
        )
    return Workload(tuple(out), scale, capacity, offered, shares, per_endpoint)


def _client_mix(fleet: Fleet) -> tuple[list[str], list[float]]:
    if fleet.clients:
        return [c.country for c in fleet.clients], [c.share for c in fleet.clients]
    countries = sorted({r.country for r in fleet.regions})
    return countries, [1.0] * len(countries)


def _model_mapping(trace: Trace, names: list[str], shares: dict[str, float]) -> dict[str, str]:
    """Map trace model names onto fleet models: same name kept, others by share order."""
    seen = sorted({r.model for r in trace.requests if r.model})
    by_share = sorted(names, key=lambda m: -shares[m])
    mapping: dict[str, str] = {}
    others = [m for m in seen if m not in shares]
    for m in seen:
        if m in shares:
            mapping[m] = m
    for i, m in enumerate(others):
        mapping[m] = by_share[i % len(by_share)]
    return mapping
