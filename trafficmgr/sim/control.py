"""The global level as the simulated clients meet it: the engine behind caching resolvers.

Every heartbeat interval each live endpoint's agent reports a heartbeat built from its
server's state, with the meaning vLLM's metrics have: ``requests_running`` is the requests in
the batch (decoding, plus the one prefilling), ``requests_waiting`` every request that has not
started yet (queued for a free slot or KV room, or admitted but waiting for the prefill), so a
server asked for more than it can run reports the excess as its queue; ``kv_cache_usage`` the
share of its KV room reserved; each GPU's ``util_pct`` the busy share of the last interval
(work done at full-batch rates / interval). A failed endpoint reports nothing.

The control loop then calls the engine exactly as the real one does: ``evaluate_fleet``
(endpoint health, the failover state machines) and ``compile_table`` (residency, failover
order, weights, against the previous table). Clients resolve through one of their country's
resolvers, which caches one weighted-random answer of ``lookup`` for the fleet's TTL, as
resolvers do with a weighted DNS record. Residency is checked against the engine's
``allowed_regions``; nothing here decides a route itself.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from trafficmgr.routing.failover import FleetEvaluation, RegionMachine, evaluate_fleet
from trafficmgr.routing.residency import ResidencyDecision, allowed_regions
from trafficmgr.routing.table import compile_table, lookup, static_table
from trafficmgr.routing.types import (
    ClientLocation,
    Fleet,
    GpuSample,
    Heartbeat,
    ProbeSample,
    RoutingTable,
    ServerSample,
    WeightedRegion,
)
from trafficmgr.sim.server import EndpointServer

EPOCH = 1_700_000_000.0  # simulation second 0 on the engine's clock
GPU_MEMORY_MB = 81_920.0


@dataclass(frozen=True, slots=True)
class Answer:
    region: str | None
    expires: float


class GlobalLevel:
    """Heartbeats in, the engine's table out, answers cached per resolver for the TTL."""

    def __init__(self, fleet: Fleet, seed: int) -> None:
        self.fleet = fleet
        self.table: RoutingTable = static_table(fleet, EPOCH)
        self.evaluation: FleetEvaluation | None = None
        self.machines: dict[str, RegionMachine] = {}
        self.heartbeats: dict[str, Heartbeat] = {}
        self.rng = random.Random(seed * 7919 + 17)
        self.seq = 0
        self.transitions: list[tuple[float, str, str, str]] = []
        self._answers: dict[tuple[str, int, str], Answer] = {}
        self._residency: dict[str, ResidencyDecision] = {}

    def report(
        self, server: EndpointServer, gpu_util: float, tokens_per_s: float, now: float
    ) -> None:
        """Record the heartbeat a live endpoint's agent sends."""
        e, s = server.endpoint, server
        self.seq += 1
        gpus = tuple(
            GpuSample(
                i,
                f"GPU-{e.name}-{i}",
                e.gpu,
                100.0 * gpu_util,
                GPU_MEMORY_MB * s.kv_used / s.rates.kv_capacity_tokens,
                GPU_MEMORY_MB,
            )
            for i in range(e.gpus)
        )
        prefilling = 1 if s.prefill else 0
        running = len(s.decoding) + prefilling
        waiting = len(s.waiting) + len(s.prefill) - prefilling
        kv = min(1.0, s.kv_used / s.rates.kv_capacity_tokens)
        ttfts = sorted(s.recent_ttfts)
        s.recent_ttfts.clear()
        p50 = ttfts[len(ttfts) // 2] * 1000.0 if ttfts else 0.0
        p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] * 1000.0 if ttfts else 0.0
        sample = ServerSample("sim", running, waiting, kv, tokens_per_s, p50, p99, e.models)
        self.heartbeats[e.name] = Heartbeat(
            e.name, self.seq, EPOCH + now, EPOCH + now, gpus, sample, ProbeSample(True, 1.0)
        )

    def tick(self, now: float) -> None:
        """Run one control-loop tick: judge the fleet and compile the table."""
        evaluation = evaluate_fleet(self.fleet, self.heartbeats, self.machines, EPOCH + now)
        self.evaluation = evaluation
        self.machines = dict(evaluation.machines)
        for t in evaluation.transitions:
            self.transitions.append((t.at - EPOCH, t.region, t.new.value, t.reason))
        self.table = compile_table(
            self.fleet, evaluation.statuses, EPOCH + now, previous=self.table
        )

    def healthy(self, endpoint: str) -> bool:
        """Tell whether the engine lets the endpoint take traffic (True before evidence)."""
        if self.evaluation is None:
            return True
        health = self.evaluation.endpoints.get(endpoint)
        return health is None or health.healthy or not health.evidence

    def resolve(
        self, country: str, client: ClientLocation, resolver: int, model: str, now: float
    ) -> str | None:
        """Return the region a client's resolver answers for ``model`` (cached for the TTL)."""
        key = (country, resolver, model)
        cached = self._answers.get(key)
        if cached is not None and cached.expires > now:
            return cached.region
        region = self._choose(lookup(self.table, client, model))
        self._answers[key] = Answer(region, now + max(self.fleet.ttl, 0))
        return region

    def allows(self, country: str, client: ClientLocation, region: str) -> bool:
        """Tell whether residency (strict rules) lets ``region`` serve the client."""
        decision = self._residency.get(country)
        if decision is None:
            decision = self._residency[country] = allowed_regions(self.fleet, client)
        if not decision.strict:
            return True
        allowed = (
            decision.strict_regions if decision.strict_regions is not None else (decision.regions)
        )
        return allowed is None or region in allowed

    def _choose(self, entries: tuple[WeightedRegion, ...]) -> str | None:
        if not entries:
            return None
        total = sum(e.weight for e in entries)
        if total <= 0:
            return entries[0].region
        u = self.rng.random() * total
        for e in entries:
            u -= e.weight
            if u < 0:
                return e.region
        return entries[-1].region
