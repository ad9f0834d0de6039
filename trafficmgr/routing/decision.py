"""The per-request decision's rules: which regions to try, in which order, over which loads.

``POST /api/v1/route``, the gateway, the Envoy endpoint picker and the simulator ask the same
questions of one request; the answers are here, pure, so they cannot drift apart:

- ``region_candidates``: the zone's weighted regions the client's residency allows, one drawn
  by weight first (deterministically from a hash of the client key and the model when the
  client address is known, so one client keeps its region while the weights hold; at random
  for a country, which is not a client), then the rest by weight, then regions residency
  allows that the list leaves out (``reserve_regions``: the one-tick gap before the table
  catches up with a failure). No allowed region, no candidates, and a note saying why;
  ``denied`` when the client cannot be located and the fleet denies such clients.
- ``build_loads``: the picker's view of a region's endpoints from their heartbeats and the
  engine's ``endpoint_health``. A region without evidence yet (state ``unknown``) counts its
  endpoints healthy by configuration, as the table does; a region the list names while it is
  down (all allowed regions down, fail_open) is served by configuration too. What a heartbeat
  says of the work queued (running, waiting, KV cache) becomes outstanding prefill and decode
  tokens (``reported.reported_work``): a caller without an in-flight view of its own (``/route``)
  then weighs an endpoint's queue, and a gateway takes the larger of it and its own figures.
- ``histogram_delta``: what a server's cumulative output-length histogram grew by since it
  was last seen, for the picker's estimator.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from trafficmgr.routing.draw import cumulative, draw_index, unit_point
from trafficmgr.routing.estimator import service_rates
from trafficmgr.routing.geo import rtt_ms
from trafficmgr.routing.health import endpoint_health
from trafficmgr.routing.pickbase import EndpointLoad
from trafficmgr.routing.reported import reported_work
from trafficmgr.routing.residency import base_decision
from trafficmgr.routing.table import lookup, zone_keys
from trafficmgr.routing.types import (
    Fleet,
    GpuProfile,
    Heartbeat,
    OutputHistogram,
    Region,
    RegionState,
    Request,
    RoutingTable,
    WeightedRegion,
)

SERVING_STATES = frozenset({"healthy", "degraded", "recovering", "unknown"})
RESERVE_REASON = (
    "not in this zone's list yet; allowed and serving, tried while the table catches up"
)


@dataclass(frozen=True, slots=True)
class RegionCandidates:
    """The regions one request may go to, in the order to try them."""

    regions: tuple[WeightedRegion, ...]  # empty: nothing allowed (see ``note``)
    listed: int  # how many of ``regions`` come from the zone's list (the rest are reserve)
    note: str  # why the list is empty, when it is
    denied: bool = False  # the client cannot be located and the fleet denies such clients


def region_candidates(
    fleet: Fleet,
    table: RoutingTable,
    request: Request,
    key: str | None,
    rng: random.Random | None = None,
) -> RegionCandidates:
    """Return the regions to try for ``request``; ``key`` is the client address, if known."""
    decision = base_decision(fleet, request.client)
    if decision.denied:
        return RegionCandidates((), 0, decision.reason, denied=True)
    entries = lookup(table, request.client, request.model)
    strict = decision.strict_regions
    allowed = [w for w in entries if strict is None or w.region in strict]
    if not allowed:
        return RegionCandidates((), 0, table_note(table, request))
    first = ordered(allowed, key, request.model, rng)
    reserve = reserve_regions(fleet, table, request, strict, {w.region for w in entries})
    return RegionCandidates(tuple(first + reserve), len(first), "")


def ordered(
    entries: Sequence[WeightedRegion],
    key: str | None,
    model: str,
    rng: random.Random | None = None,
) -> list[WeightedRegion]:
    """Return the regions to try: one drawn by weight first, then the rest by weight."""
    u = (rng or random).random() if key is None else unit_point(f"{key}|{model}")
    running = cumulative(w.weight for w in entries)
    if not running or running[-1] <= 0:
        running = cumulative(1.0 for _ in entries)  # no weights: an even draw
    first = draw_index(running, u)
    rest = sorted(
        (w for i, w in enumerate(entries) if i != first), key=lambda w: (-w.weight, w.region)
    )
    return [entries[first], *rest]


def reserve_regions(
    fleet: Fleet,
    table: RoutingTable,
    request: Request,
    strict: tuple[str, ...] | None,
    listed: set[str],
) -> list[WeightedRegion]:
    """Regions residency allows that the zone's list leaves out, nearest first.

    Tried only when no listed region can take the request: between an endpoint's failure and
    the next table, the list may still name only the failing region (a one-tick gap).
    """
    reserve: list[tuple[float, int, str]] = []
    for region in fleet.regions:
        status = table.regions.get(region.name)
        if (
            region.name in listed
            or (strict is not None and region.name not in strict)
            or status is None
            or status.state.value not in SERVING_STATES
            or not any(request.model in e.models for e in region.endpoints)
        ):
            continue
        point = request.client.point
        distance = rtt_ms(point, region.location) if point is not None else 0.0
        reserve.append((distance, region.priority, region.name))
    return [
        WeightedRegion(name, 0.0, f"{RESERVE_REASON}, rtt ~{rtt:.0f} ms")
        for rtt, _, name in sorted(reserve, key=lambda r: (r[1], r[0], r[2]))
    ]


def table_note(table: RoutingTable, request: Request) -> str:
    """Say why the table gives the request's client zone no region for its model."""
    for zone in zone_keys(request.client):
        if zone in table.zones:
            return table.notes.get(zone, {}).get(request.model, "empty list")
    return "no zone matches the client"


def build_loads(
    fleet: Fleet,
    region: Region,
    state: RegionState,
    now: float,
    beats: Mapping[str, Heartbeat],
) -> tuple[EndpointLoad, ...]:
    """Build the picker's live view of a region's endpoints from their heartbeats."""
    out = []
    for e in region.endpoints:
        profile = fleet.gpu_profiles.get(e.gpu) or GpuProfile(e.gpu, 1.0, 1.0, 1)
        hb = beats.get(e.name)
        health = endpoint_health(e, hb, profile, fleet.failover, now)
        healthy = (
            health.healthy
            or state is RegionState.DOWN
            or (state is RegionState.UNKNOWN and not health.evidence)
        )
        endpoint = replace(e, models=health.models) if health.healthy and health.models else e
        server = hb.server if hb else None
        gpus = hb.gpus if hb else ()
        running = server.requests_running if server else 0
        waiting = server.requests_waiting if server else 0
        kv = server.kv_cache_usage if server else 0.0
        prefill, decode = reported_work(service_rates(profile, e.gpus), running, waiting, kv)
        out.append(
            EndpointLoad(
                endpoint=endpoint,
                profile=profile,
                healthy=healthy,
                running=running,
                waiting=waiting,
                outstanding_prefill_tokens=prefill,
                outstanding_decode_tokens=decode,
                kv_cache_usage=kv,
                gpu_util=sum(g.util_pct for g in gpus) / (100.0 * len(gpus)) if gpus else 0.0,
                latency_ewma_ms=server.ttft_p50_ms if server else 0.0,
            )
        )
    return tuple(out)


def histogram_delta(
    h: OutputHistogram, prev: OutputHistogram | None
) -> tuple[tuple[int, ...], int]:
    """Return the cumulative counts added since ``prev``: all of ``h`` on first sight, or
    when a count went down (the server restarted).

    The agent leaves out bounds that say nothing (empty at the bottom, full at the top), so
    the bounds may move as traffic grows: then each new bound is compared with ``prev``'s
    count at the highest of its bounds not above it (exact for the bounds left out).
    """
    if prev is None or h.count < prev.count:
        return h.counts, h.count
    total = h.count - prev.count
    if prev.le == h.le:
        if any(c < p for c, p in zip(h.counts, prev.counts, strict=True)):
            return h.counts, h.count
        return tuple(c - p for c, p in zip(h.counts, prev.counts, strict=True)), total
    counts: list[int] = []
    for bound, running in zip(h.le, h.counts, strict=True):
        j = bisect.bisect_right(prev.le, bound) - 1
        before = prev.counts[j] if j >= 0 else 0
        grown = min(total, max(0, running - before))
        counts.append(max(grown, counts[-1]) if counts else grown)
    return tuple(counts), total
