"""What a gateway process knows when it picks: in the simulation, what production gives it.

A gateway in production (``trafficmgr.requestpath``) picks from two sources: the heartbeats
the control plane stores, read every half second but as old as the agents' heartbeat
interval, and its own ledger of the requests it sent and has not seen finish. Several gateway
processes serve one fleet (uvicorn workers, replicas, regions), and each counts only its own
requests. So the simulation gives each of ``gateways`` processes:

- the heartbeat view of the last control-loop tick: the engine's ``decision.build_loads``
  over the heartbeats the simulated agents sent (health, running, waiting, KV cache, GPU use,
  and the outstanding work it estimates from them, ``routing.reported``);
- its own requests on each endpoint, counted as its ledger counts them (``server.flight``);
- the prompt blocks it sent each endpoint (its approximate prefix-cache index, bounded like
  the gateway's), not what the servers' caches really hold;

combined by the engine's ``reported.with_own_flight`` with each process's own count at the
heartbeat (``own_at_report``), as the gateway's ``regionview`` does,
and slow start by the engine's ``slowstart`` rules for endpoints that come back. Requests
are assigned to the gateways round robin in arrival order; each has its own pickers, and
they share what they learn from completions, as gateways do through the completions stream.

``SharedModel`` (``Simulation(shared=...)``) models the shared request-path state
(``trafficmgr.requestpath.shared``): every ``interval_s`` each gateway publishes its part (its
in flight per endpoint, ``contracts.shared_part``) and the prompt blocks it sent since, and
``rtt_s`` later every gateway merges the others' parts with the production merge
(``routing.sharedstate``) under the same staleness bound. So a gateway's picker sees its own
requests now and the others' as of the last publish it has read, never fresher.

``Simulation(omniscient=True)`` instead shows every picker every server's exact state at the
instant of the pick, true prefix caches included: an upper bound no deployment has, kept to
measure what the honest view costs.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from trafficmgr.contracts import SharedBlocks, SharedProcess, shared_part
from trafficmgr.routing.decision import build_loads
from trafficmgr.routing.picker import EndpointLoad
from trafficmgr.routing.reported import peers, with_own_flight
from trafficmgr.routing.sharedstate import PeerFlight, merge_blocks, merge_parts, with_peers
from trafficmgr.routing.slowstart import DEFAULT_FLOOR, offered, ramp
from trafficmgr.routing.types import AdminState, Fleet, Heartbeat, RegionState, RoutingTable
from trafficmgr.sim.server import EndpointServer

PREFIX_BLOCKS_PER_ENDPOINT = 4096  # the gateway's default (``RequestPathConfig``)


@dataclass(frozen=True, slots=True)
class SharedModel:
    """The shared state as production runs it: publish period, Redis round trip, bound."""

    interval_s: float = 0.005  # production's default (``requestpath.shared.config``)
    rtt_s: float = 0.0005  # one pipelined round trip to Redis on a LAN
    max_staleness_s: float = 1.0


class GatewayViews:
    """The heartbeat view every gateway shares, and what each gateway sent where."""

    def __init__(
        self,
        fleet: Fleet,
        region_servers: Sequence[Sequence[EndpointServer]],
        gateways: int,
        epoch: float,
        seed: int = 0,
        shared: SharedModel | None = None,
    ) -> None:
        if gateways < 1:
            raise ValueError(f"gateways: expected at least 1, got {gateways}")
        self.fleet, self.region_servers, self.count, self.epoch = (
            fleet,
            region_servers,
            gateways,
            epoch,
        )
        self.base: list[tuple[EndpointLoad, ...]] = []
        # per gateway, per server index: the prompt blocks it sent there (LRU)
        self.blocks: list[dict[int, OrderedDict[int, None]]] = [{} for _ in range(gateways)]
        self.since: dict[str, float] = {}  # endpoints in their slow start: since when (sim s)
        # per gateway, per server index: its requests there when the heartbeat was taken
        self.own_at_report: list[dict[int, int]] = [{} for _ in range(gateways)]
        self.peers: list[list[float]] = [[] for _ in range(gateways)]  # per gateway, region
        self._usable: set[str] | None = None
        self.rng = random.Random(seed * 104_729 + 3)
        self.shared = shared
        # shared: per gateway, per server index, the others' figures merged last; the blocks
        # each sent since its last publish; the parts and blocks published, not yet read
        self.peer_flight: list[dict[int, PeerFlight]] = [{} for _ in range(gateways)]
        self.outbox: list[dict[str, list[int]]] = [{} for _ in range(gateways)]
        self.published: list[tuple[list[SharedProcess], list[tuple[str, SharedBlocks]]]] = []
        self.index_of = {s.endpoint.name: s.index for rs in region_servers for s in rs}
        self.region_servers_flat = {s.index: s.endpoint.name for rs in region_servers for s in rs}
        self.refresh(None, {}, 0.0)

    def gateway_of(self, request_index: int) -> int:
        """Return the gateway process a request goes through (round robin)."""
        return request_index % self.count

    def refresh(
        self, table: RoutingTable | None, heartbeats: Mapping[str, Heartbeat], now: float
    ) -> None:
        """Take the heartbeat view of a control-loop tick; start slow start for returns."""
        base = []
        usable: set[str] = set()
        for region, servers in zip(self.fleet.regions, self.region_servers, strict=True):
            status = table.regions.get(region.name) if table is not None else None
            state = status.state if status is not None else RegionState.UNKNOWN
            loads = build_loads(self.fleet, region, state, self.epoch + now, heartbeats)
            by_name = {load.endpoint.name: load for load in loads}
            base.append(tuple(by_name[s.endpoint.name] for s in servers))
            usable.update(
                load.endpoint.name
                for load in loads
                if load.healthy
                and load.endpoint.weight > 0
                and load.endpoint.admin_state is AdminState.ACTIVE
            )
        if self._usable is not None:
            for name in usable - self._usable:
                self.since[name] = now
        self._usable = usable
        slow = self.fleet.failover.slow_start_s
        self.since = {n: t for n, t in self.since.items() if now - t < slow}
        self.base = base
        for gateway, counts in enumerate(self.own_at_report):
            counts.clear()
            self.peers[gateway] = []
            for servers, loads in zip(self.region_servers, base, strict=True):
                own = 0
                theirs = self.peer_flight[gateway]
                for server in servers:
                    mine = server.flight(gateway)[0]
                    peer = theirs.get(server.index)
                    if peer is not None:  # as production's ``Gate.running``: own + others'
                        mine += peer[0]
                    own += mine
                    if mine:
                        counts[server.index] = mine
                reported = sum(b.running + b.waiting for b in loads)
                self.peers[gateway].append(peers(reported, own))

    def loads(
        self,
        gateway: int,
        region: int,
        excluded: frozenset[int],
        hashes: tuple[int, ...],
        now: float,
    ) -> tuple[EndpointLoad, ...]:
        """Return what ``gateway`` offers its picker for one request in ``region``."""
        full: list[EndpointLoad] = []
        ramping: list[tuple[float, EndpointLoad]] = []
        sent, at_report = self.blocks[gateway], self.own_at_report[gateway]
        slow = self.fleet.failover.slow_start_s
        for server, base in zip(self.region_servers[region], self.base[region], strict=True):
            running, prefill, decode = server.flight(gateway)
            peer = self.peer_flight[gateway].get(server.index)
            if peer is not None:
                running, prefill, decode = with_peers(running, prefill, decode, peer)
            held = _leading(sent.get(server.index), hashes)
            load = base
            own = at_report.get(server.index, 0)
            if running or held or own:
                load = with_own_flight(
                    base, running, prefill, decode, held, own, self.peers[gateway][region]
                )
            if server.index in excluded:
                load = replace(load, healthy=False)
            start = self.since.get(server.endpoint.name)
            share = 1.0 if start is None else ramp(now - start, slow, DEFAULT_FLOOR)
            if share < 1.0:
                ramping.append((share, load))
            else:
                full.append(load)
        return tuple(offered(full, ramping, self.rng.random) if ramping else full)

    def publish(self, now: float) -> None:
        """Every gateway publishes its part and the blocks it sent since (one cycle)."""
        servers = [s for rs in self.region_servers for s in rs]
        flights: list[list[tuple[str, int, float, float]]] = [[] for _ in range(self.count)]
        for server in servers:
            for gateway, (n, prefill, decode) in server.flights().items():
                flights[gateway].append((server.endpoint.name, n, prefill, decode))
        parts = [shared_part(str(g), now, flights[g], {}, {}) for g in range(self.count)]
        batches = [(str(g), box) for g, box in enumerate(self.outbox) if box]
        self.outbox = [{} for _ in range(self.count)]
        self.published.append((parts, batches))

    def install(self, now: float) -> None:
        """Every gateway merges the oldest publish not yet read (``rtt_s`` after it)."""
        if not self.published or self.shared is None:
            return
        parts, batches = self.published.pop(0)
        for gateway in range(self.count):
            pid = str(gateway)
            merged = merge_parts(parts, pid, now, self.shared.max_staleness_s)
            index = self.index_of
            self.peer_flight[gateway] = {index[n]: f for n, f in merged.flight.items()}
            merge_blocks(batches, pid, partial(self._remember, gateway))

    def _remember(self, gateway: int, endpoint: str, hashes: list[int]) -> None:
        self._add(gateway, self.index_of[endpoint], hashes)

    def sent(self, gateway: int, server: int, hashes: tuple[int, ...]) -> None:
        """Remember the prompt blocks ``gateway`` sent to ``server``."""
        if not hashes:
            return
        if self.shared is not None:
            name = self.region_servers_flat[server]
            box = self.outbox[gateway].setdefault(name, [])
            if len(box) < PREFIX_BLOCKS_PER_ENDPOINT:
                box.extend(hashes)
        self._add(gateway, server, hashes)

    def _add(self, gateway: int, server: int, hashes: Sequence[int]) -> None:
        blocks = self.blocks[gateway].get(server)
        if blocks is None:
            blocks = self.blocks[gateway][server] = OrderedDict()
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > PREFIX_BLOCKS_PER_ENDPOINT:
            blocks.popitem(last=False)


def _leading(blocks: OrderedDict[int, None] | None, hashes: tuple[int, ...]) -> frozenset[int]:
    """Return the leading blocks of a prompt that ``blocks`` holds."""
    if not blocks or not hashes:
        return frozenset()
    n = 0
    for h in hashes:
        if h not in blocks:
            break
        n += 1
    return frozenset(hashes[:n]) if n else frozenset()
