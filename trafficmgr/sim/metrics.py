"""Summaries of a run, in the output JSON's shape (docs/architecture.md §4).

- ``latency_ms`` and ``ttft_ms``: percentiles (linear interpolation) over completed requests,
  network RTT included.
- ``throughput_tokens_per_s``: output tokens of completed requests per second of makespan
  (first send to last completion).
- ``goodput``: completed requests per second of makespan that met the SLO: TTFT within
  ``slo.ttft_s`` and, after the first token, at most ``slo.tpot_s`` per output token.
- ``util_mean``: mean over all endpoints of utilisation, the share of an endpoint's
  full-batch capacity used (prefill tokens / prefill rate + decode tokens / decode rate) over
  the arrival window, so drain time after the last arrival does not count.
- ``region_share``: share of the requests the DNS answers sent to each region.
- ``residency_violations``: requests answered with a region strict residency forbids.

Utilisation spread, three ways, because a spread has two authors. The global table decides
how much demand each region gets (client geography, residency, failover priority, spill-over
headroom: a priority-2 region is a standby that takes only what the others cannot); the
in-region picker decides how a region's demand is shared among its endpoints, and can only
balance among the endpoints it is given.

- ``util_cov``: coefficient of variation (population standard deviation / mean) over all
  endpoints of the fleet, unweighted: both authors mixed, standbys included.
- ``util_cov_serving``: the same over the endpoints that served traffic, leaving out
  endpoints the failover order kept idle on purpose.
- ``util_cov_region``: the balance the in-region picker is answerable for, and what the
  "no hot spots" target (CoV <= 0.10) is held to. For each region that served traffic, the
  CoV of its endpoints' utilisation weighted by their capacity (requests/s at full batch for
  the workload's mean request, the unit ``load`` is measured in), so that the weighted mean
  is the region's own utilisation and an L4 x4 counts for what it can carry next to an
  H100 x8; then the mean of those CoVs weighted by the work each region served, so a
  standby that took a few spilled requests does not outweigh a region serving thousands.
- ``util_by_region``: each region's capacity-weighted ``mean`` utilisation and ``cov``
  (null when the region did no work).
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


def coefficient_of_variation(values: list[float], weights: list[float] | None = None) -> float:
    """Return the (weighted) population standard deviation over the (weighted) mean."""
    if not values:
        return math.nan
    w = weights if weights is not None else [1.0] * len(values)
    total = sum(w)
    if total <= 0:
        return math.nan
    mean = sum(v * x for v, x in zip(values, w, strict=True)) / total
    if mean <= 0:
        return 0.0
    var = sum(x * (v - mean) ** 2 for v, x in zip(values, w, strict=True)) / total
    return math.sqrt(var) / mean


def region_balance(
    utilisation: dict[str, float], region_of: dict[str, str], capacity: dict[str, float]
) -> tuple[dict[str, dict[str, float | None]], float]:
    """Return each region's capacity-weighted mean and CoV, and their work-weighted mean CoV.

    An endpoint missing from ``capacity`` (not serving when the run began) weighs 1.
    """
    members: dict[str, list[str]] = {}
    for name in utilisation:
        members.setdefault(region_of.get(name, ""), []).append(name)
    regions: dict[str, dict[str, float | None]] = {}
    weighted = work_total = 0.0
    for region, names in members.items():
        utils = [utilisation[n] for n in names]
        caps = [capacity.get(n, 1.0) for n in names]
        work = sum(u * c for u, c in zip(utils, caps, strict=True))
        cov = coefficient_of_variation(utils, caps) if work > 0 else math.nan
        regions[region] = {
            "mean": _round(work / sum(caps), 4) if sum(caps) > 0 else None,
            "cov": _round(cov, 4),
        }
        if work > 0:
            weighted += work * cov
            work_total += work
    return regions, weighted / work_total if work_total > 0 else math.nan


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
    by_region, in_region = region_balance(
        outcome.utilisation, outcome.endpoint_region, workload.endpoint_capacity_rps
    )
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
        "util_cov_serving": _round(coefficient_of_variation([u for u in utils if u > 0]), 4),
        "util_cov_region": _round(in_region, 4),
        "util_by_region": by_region,
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
