"""Summaries of a run, in the output JSON's shape (ARCHITECTURE §6).

- ``latency_ms`` and ``ttft_ms``: percentiles (linear interpolation) over completed requests,
  network RTT included.
- ``throughput_tokens_per_s``: output tokens of completed requests per second of makespan
  (first send to last completion).
- ``goodput``: completed requests per second of makespan that met the SLO: TTFT within
  ``slo.ttft_s`` and, after the first token, at most ``slo.tpot_s`` per output token.
- ``util_mean``, ``util_cov``: mean and coefficient of variation (population standard
  deviation / mean) over all endpoints of utilisation, the share of an endpoint's full-batch
  capacity used (prefill tokens / prefill rate + decode tokens / decode rate) over the
  arrival window, so drain time after the last arrival does not count.
- ``region_share``: share of the requests the DNS answers sent to each region.
- ``residency_violations``: requests answered with a region strict residency forbids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trafficmgr.sim.des import DONE, REJECTED, Outcome
from trafficmgr.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float = 2.0
    tpot_s: float = 0.1


DEFAULT_SLO = Slo()


def percentile(ordered: list[float], q: float) -> float:
    """Return the q-quantile (0..1) of sorted values, linearly interpolated; NaN when empty."""
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def coefficient_of_variation(values: list[float]) -> float:
    if not values:
        return math.nan
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(var) / mean


def summarise(outcome: Outcome, workload: Workload, slo: Slo = DEFAULT_SLO) -> dict[str, Any]:
    """Return one policy's entry of the output JSON."""
    reqs = workload.requests
    done = [i for i, s in enumerate(outcome.status) if s == DONE]
    latency = sorted(outcome.latency_s[i] * 1000.0 for i in done)
    ttft = sorted(outcome.ttft_s[i] * 1000.0 for i in done)
    makespan = max(outcome.makespan_s - (reqs[0].send_at if reqs else 0.0), 1e-9)
    tokens = sum(reqs[i].output_tokens for i in done)
    good = sum(1 for i in done if _meets(outcome, i, reqs[i].output_tokens, slo))
    utils = list(outcome.utilisation.values())
    routed = [r for r in outcome.region_of if r >= 0]
    share = {name: 0.0 for name in outcome.regions}
    for r in routed:
        share[outcome.regions[r]] += 1.0
    return {
        "requests": len(reqs),
        "completed": len(done),
        "rejected": sum(1 for s in outcome.status if s == REJECTED),
        "latency_ms": {
            "p50": _round(percentile(latency, 0.5)),
            "p95": _round(percentile(latency, 0.95)),
            "p99": _round(percentile(latency, 0.99)),
        },
        "ttft_ms": {"p50": _round(percentile(ttft, 0.5)), "p99": _round(percentile(ttft, 0.99))},
        "throughput_tokens_per_s": _round(tokens / makespan),
        "goodput": _round(good / makespan, 3),
        "util_cov": _round(coefficient_of_variation(utils), 4),
        "util_mean": _round(sum(utils) / len(utils), 4) if utils else None,
        "region_share": {k: round(v / len(routed), 4) if routed else 0.0 for k, v in share.items()},
        "residency_violations": outcome.residency_violations,
    }


def _meets(outcome: Outcome, i: int, output_tokens: int, slo: Slo) -> bool:
    ttft = outcome.ttft_s[i]
    decode = outcome.latency_s[i] - ttft
    return ttft <= slo.ttft_s and decode <= slo.tpot_s * max(0, output_tokens - 1)


def _round(value: float, digits: int = 1) -> float | None:
    """Round for the JSON; NaN (nothing completed) becomes null."""
    return None if math.isnan(value) else round(value, digits)
