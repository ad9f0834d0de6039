"""Discrete-event simulation of one policy over one workload (a heapq of timed events).

A request's life: the client sends it at its trace time and resolves the region through its
resolver (``control.GlobalLevel``, the engine's table); it reaches the region's gateway half
an RTT later (RTT from the engine's ``rtt_ms``, client country centroid to region); the
policy picks an endpoint; the endpoint serves it (``server.EndpointServer``); the answer
travels half an RTT back. So an unloaded request's latency is RTT + prefill + decode and its
TTFT is RTT + prefill. A gateway that picked an endpoint which turns out to be down retries
once on another (connection refused is immediate); a region that is down refuses everything.

Every ``heartbeat_interval_s`` the live endpoints report and the engine evaluates the fleet
and compiles the table (``control.GlobalLevel.tick``); faults (``faults.Fault``) take regions
or endpoints down and bring them back, and only those heartbeats tell the engine.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trafficmgr.routing.geo import rtt_ms
from trafficmgr.routing.picker import EndpointLoad
from trafficmgr.routing.types import Fleet, GeoPoint, Request
from trafficmgr.sim.control import EPOCH, GlobalLevel
from trafficmgr.sim.faults import Fault
from trafficmgr.sim.gateways import GatewayViews, SharedModel
from trafficmgr.sim.policies import Policy
from trafficmgr.sim.server import EndpointServer, Job
from trafficmgr.sim.workload import Workload

FAULT_START, FAULT_END, TICK, SERVER, GATEWAY, PUBLISH, MERGE = 0, 1, 2, 3, 4, 5, 6
PENDING, DONE, REJECTED = 0, 1, 2
LATENCY_EWMA_ALPHA = 0.2
DEFAULT_RTT_MS = 100.0  # a client whose country has no known centroid


@dataclass
class Outcome:
    """Raw results of one run, per request and per endpoint."""

    policy: str
    status: list[int]
    latency_s: list[float]
    ttft_s: list[float]
    region_of: list[int]
    regions: list[str]
    utilisation: dict[str, float]  # per endpoint, over the arrival window
    window_s: float
    makespan_s: float
    endpoint_region: dict[str, str] = field(default_factory=dict)
    residency_violations: int = 0
    rejects: Counter[str] = field(default_factory=Counter)
    transitions: list[tuple[float, str, str, str]] = field(default_factory=list)
    region_timeline: list[tuple[float, int]] = field(default_factory=list)  # (send, region)


def build_servers(
    fleet: Fleet, prefix_cache: bool = True
) -> tuple[list[EndpointServer], list[list[EndpointServer]]]:
    """Return every endpoint's server, and them grouped by region (fleet order)."""
    servers: list[EndpointServer] = []
    by_region: list[list[EndpointServer]] = []
    for region in fleet.regions:
        members = []
        for e in region.endpoints:
            profile = fleet.gpu_profiles.get(e.gpu)
            if profile is not None:
                members.append(EndpointServer(len(servers), e, profile, prefix_cache))
                servers.append(members[-1])
        by_region.append(members)
    return servers, by_region


class Simulation:
    """One policy over one workload; ``run`` returns the outcome."""

    def __init__(
        self,
        fleet: Fleet,
        workload: Workload,
        policy: Policy,
        *,
        seed: int = 0,
        faults: tuple[Fault, ...] = (),
        prefix_cache: bool = True,
        progress: Callable[[float], None] | None = None,
        gateways: int = 1,
        omniscient: bool = False,
        shared: SharedModel | None = None,
    ) -> None:
        self.fleet, self.workload, self.policy, self.progress = fleet, workload, policy, progress
        self.regions = [r.name for r in fleet.regions]
        self.region_index = {name: i for i, name in enumerate(self.regions)}
        self.servers, self.region_servers = build_servers(fleet, prefix_cache)
        self.views = (
            None
            if omniscient
            else GatewayViews(fleet, self.region_servers, gateways, EPOCH, seed, shared)
        )
        # the shared state's cycles matter only to pickers that read the views
        self.shared = shared if self.views is not None and policy.name != "oracle" else None
        self.global_level = GlobalLevel(fleet, seed)
        self.faults = faults
        self.region_down = [False] * len(self.regions)
        n = len(workload.requests)
        self.status = [PENDING] * n
        self.latency = [math.nan] * n
        self.ttft = [math.nan] * n
        self.rtt = [0.0] * n
        self.region_of = [-1] * n
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.inflight = 0
        self.outcome = Outcome(policy.name, self.status, self.latency, self.ttft,
                               self.region_of, self.regions, {}, 0.0, 0.0)  # fmt: skip
        self.outcome.endpoint_region = {s.endpoint.name: s.endpoint.region for s in self.servers}
        self._rtts: dict[tuple[str, int], float] = {}
        self._util = [0.0] * len(self.servers)
        self._last_work = [0.0] * len(self.servers)
        self._last_decoded = [0.0] * len(self.servers)
        self._ewma = [0.0] * len(self.servers)

    # --- the gateway's view (policies.GatewayView) ------------------------------------

    def healthy(self, server: EndpointServer) -> bool:
        return self.global_level.healthy(server.endpoint.name)

    def gpu_util(self, server: EndpointServer) -> float:
        return self._util[server.index]

    def latency_ewma_ms(self, server: EndpointServer) -> float:
        return self._ewma[server.index]

    def loads(
        self,
        request: Request,
        servers: Sequence[EndpointServer],
        excluded: frozenset[int],
        gateway: int,
        now: float,
    ) -> tuple[EndpointLoad, ...]:
        """Return what the request's gateway process offers its picker (see the module doc)."""
        if self.views is not None and servers:
            region = self.region_index[servers[0].endpoint.region]
            return self.views.loads(gateway, region, excluded, request.prefix_hashes, now)
        hashes = request.prefix_hashes
        return tuple(
            s.load(
                self.healthy(s) and s.index not in excluded,
                hashes,
                self._util[s.index],
                self._ewma[s.index],
            )
            for s in servers
        )

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> Outcome:
        """Simulate until every request has completed or been rejected."""
        reqs = self.workload.requests
        n, i, heap = len(reqs), 0, self.heap
        self._push(0.0, TICK, 0, 0)
        if self.shared is not None:
            self._push(0.0, PUBLISH, 0, 0)
        for k, fault in enumerate(self.faults):
            self._push(fault.start, FAULT_START, k, 0)
            if not math.isinf(fault.end):
                self._push(fault.end, FAULT_END, k, 0)
        handlers = {
            FAULT_START: self._fault_start,
            FAULT_END: self._fault_end,
            TICK: self._tick,
            SERVER: self._server,
            GATEWAY: self._gateway,
            PUBLISH: self._publish,
            MERGE: self._merge,
        }
        now = 0.0
        while True:
            if i < n and (not heap or reqs[i].send_at < heap[0][0]):
                now = reqs[i].send_at
                self._send(i, now)
                i += 1
                if i == n:
                    self._measure(now)
                continue
            if not heap:
                break
            now, kind, _, a, b = heapq.heappop(heap)
            if kind in (TICK, PUBLISH) and i >= n and self.inflight == 0:
                continue  # nothing left to report on
            handlers[kind](a, b, now)
        self.outcome.makespan_s = now
        self.outcome.transitions = self.global_level.transitions
        if self.progress is not None:
            self.progress(1.0)  # ticks stop with the last request, maybe short of its send time
        return self.outcome

    def _push(self, when: float, kind: int, a: int, b: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, kind, self.seq, a, b))

    def _schedule(self, server: EndpointServer) -> None:
        when = server.next_event()
        if when < math.inf:
            self._push(when, SERVER, server.index, server.version)

    # --- events -----------------------------------------------------------------------

    def _send(self, i: int, now: float) -> None:
        sr = self.workload.requests[i]
        region = self.global_level.resolve(
            sr.country, sr.request.client, sr.resolver, sr.request.model, now
        )
        if region is None:
            self._reject(i, "no region answered")
            return
        ri = self.regions.index(region)
        self.region_of[i] = ri
        self.outcome.region_timeline.append((now, ri))
        if not self.global_level.allows(sr.country, sr.request.client, region):
            self.outcome.residency_violations += 1
        self.rtt[i] = self._rtt_s(sr.country, sr.request.client.point, ri)
        self.inflight += 1
        self._push(now + self.rtt[i] / 2, GATEWAY, i, ri)

    def _gateway(self, i: int, ri: int, now: float) -> None:
        if self.region_down[ri]:
            self._finish_rejected(i, "region down")
            return
        sr = self.workload.requests[i]
        excluded: frozenset[int] = frozenset()
        gateway = self.views.gateway_of(i) if self.views is not None else 0
        for _ in range(2):
            choice = self.policy.choose(
                self, sr.request, sr.output_tokens, self.region_servers[ri], excluded, now, gateway
            )
            server = choice.server
            if server is None:
                self._finish_rejected(i, "no endpoint picked")
                return
            if server.up:
                req = sr.request
                server.submit(
                    Job(
                        i,
                        req.input_tokens,
                        sr.output_tokens,
                        choice.expected_output,
                        req.prefix_hashes,
                        gateway=gateway,
                    ),
                    now,
                )
                if self.views is not None:
                    self.views.sent(gateway, server.index, req.prefix_hashes)
                self._schedule(server)
                return
            excluded = excluded | {server.index}
        self._finish_rejected(i, "endpoint down")

    def _server(self, index: int, version: int, now: float) -> None:
        server = self.servers[index]
        if version != server.version:
            return
        first, finished = server.step(now)
        reqs = self.workload.requests
        for job in first:
            rid = job.rid
            self.ttft[rid] = now + self.rtt[rid] / 2 - reqs[rid].send_at
        for job in finished:
            rid = job.rid
            sent = reqs[rid].send_at
            self.latency[rid] = now + self.rtt[rid] / 2 - sent
            self.status[rid] = DONE
            self.inflight -= 1
            served_s = now - sent - self.rtt[rid] / 2  # at the gateway: sent on to done
            self.policy.observe(
                server.endpoint.region, reqs[rid].request, job.output_tokens, served_s
            )
            served_ms = served_s * 1000.0
            old = self._ewma[index]
            self._ewma[index] = (
                served_ms if old == 0 else old + LATENCY_EWMA_ALPHA * (served_ms - old)
            )
        self._schedule(server)

    def _tick(self, _a: int, _b: int, now: float) -> None:
        interval = self.fleet.failover.heartbeat_interval_s
        for s in self.servers:
            s.advance(now)
            work, decoded = s.work_done_s(), s.decode_done
            self._util[s.index] = min(1.0, (work - self._last_work[s.index]) / interval)
            tokens_per_s = (decoded - self._last_decoded[s.index]) / interval
            self._last_work[s.index], self._last_decoded[s.index] = work, decoded
            if s.up:
                self.global_level.report(s, self._util[s.index], tokens_per_s, now)
        self.global_level.tick(now)
        if self.views is not None:
            self.views.refresh(self.global_level.table, self.global_level.heartbeats, now)
        reqs = self.workload.requests
        if self.progress is not None and reqs:
            self.progress(min(1.0, now / max(reqs[-1].send_at, 1e-9)))
        self._push(now + interval, TICK, 0, 0)

    def _publish(self, _a: int, _b: int, now: float) -> None:
        assert self.views is not None and self.shared is not None
        self.views.publish(now)
        self._push(now + self.shared.rtt_s, MERGE, 0, 0)
        self._push(now + self.shared.interval_s, PUBLISH, 0, 0)

    def _merge(self, _a: int, _b: int, now: float) -> None:
        assert self.views is not None
        self.views.install(now)

    def _fault_start(self, k: int, _b: int, now: float) -> None:
        fault = self.faults[k]
        for server in self._targets(fault):
            for job in server.fail(now):
                self._finish_rejected(job.rid, "lost in a fault")
        if fault.target in self.regions:
            self.region_down[self.regions.index(fault.target)] = True

    def _fault_end(self, k: int, _b: int, now: float) -> None:
        fault = self.faults[k]
        for server in self._targets(fault):
            server.up = True
            server.advance(now)
        if fault.target in self.regions:
            self.region_down[self.regions.index(fault.target)] = False

    def _targets(self, fault: Fault) -> list[EndpointServer]:
        if fault.target in self.regions:
            return list(self.region_servers[self.regions.index(fault.target)])
        return [s for s in self.servers if s.endpoint.name == fault.target]

    # --- bookkeeping ------------------------------------------------------------------

    def _reject(self, i: int, why: str) -> None:
        self.status[i] = REJECTED
        self.outcome.rejects[why] += 1

    def _finish_rejected(self, i: int, why: str) -> None:
        if self.status[i] == PENDING:
            self._reject(i, why)
            self.inflight -= 1

    def _measure(self, now: float) -> None:
        """Record each endpoint's utilisation over the arrival window."""
        window = now - self.workload.requests[0].send_at
        self.outcome.window_s = window
        for s in self.servers:
            s.advance(now)
            self.outcome.utilisation[s.endpoint.name] = (
                s.work_done_s() / window if window > 0 else 0.0
            )

    def _rtt_s(self, country: str, point: GeoPoint | None, ri: int) -> float:
        key = (country, ri)
        rtt = self._rtts.get(key)
        if rtt is None:
            where = self.fleet.regions[ri].location
            rtt = (rtt_ms(point, where) if point is not None else DEFAULT_RTT_MS) / 1000.0
            self._rtts[key] = rtt
        return rtt
