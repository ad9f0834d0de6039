"""One region's endpoints as the picker sees them for one request: heartbeats plus this process.

The heartbeat part (``decision.build_loads``: health, running, waiting, KV cache, GPU use) is
built by ``RequestPath.maintain`` every ``loads_ttl_s``, off the request path. Per request
only what changed since is added: this process's in flight on each endpoint (``inflight``),
and the prompt blocks this process sent there (its approximate prefix-cache index, which
``ai_aware`` reads as ``cached_prefixes``). Running requests and outstanding prefill and
decode tokens are each the larger of the heartbeat's (the server counts every gateway's
requests, but only as of its last heartbeat; the work is estimated from its queue and KV
cache, ``routing.reported``) and this process's own, combined by the engine's
``reported.with_own_flight``: this process's requests now plus the others the heartbeat
implies beyond this process's count when it first read that heartbeat (``note_reports``),
their change since mirroring this process's own as many times as the heartbeats imply other
processes like it. With
the shared state (``shared``), the other processes' requests in flight (``Gate.peers``, merged
off the path) count as this process's own, and the blocks they sent are in the same index. An
endpoint's combined view is cached and rebuilt only when the figures it is built from
changed (this process's in flight there, or its frozen prompt blocks): a request that came
and went leaves it as it was. Which endpoints list a model and may serve it by heartbeat is
worked out once per view and model.

Then the request's candidates are the endpoints that may take it now: serving its model,
healthy and active (the engine's ``serves``), not drained here, weight above 0, in the
front's subset, not ejected, under the admission limit of the request's priority, and past
the slow-start lottery (``routing.slowstart``). An endpoint over its admission limit is
*full*: when only full endpoints remain the request is saturated (429 and the admission
queue) rather than without capacity (503).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trafficmgr.requestpath.inflight import Ledger
from trafficmgr.requestpath.outlier import OutlierDetector
from trafficmgr.routing.estimator import service_rates
from trafficmgr.routing.picker import EndpointLoad, serves
from trafficmgr.routing.reported import peers, with_own_flight
from trafficmgr.routing.sharedstate import PeerFlight, with_peers
from trafficmgr.routing.slowstart import offered as slow_start_offer
from trafficmgr.routing.types import AdminState, Region, RegionState

PREFIX_REBUILD_S = 0.02  # a busy endpoint's block set is frozen again at most this often
_NO_BLOCKS: frozenset[int] = frozenset()


class PrefixIndex:
    """The prompt blocks this process sent to one endpoint, newest kept (bounded LRU)."""

    __slots__ = ("_blocks", "_built_at", "_frozen", "dirty", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._frozen: frozenset[int] = frozenset()
        self._built_at = -1.0
        self.dirty = False

    def add(self, hashes: Sequence[int]) -> None:
        blocks = self._blocks
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
                self.dirty = True
        while len(blocks) > self.limit:
            blocks.popitem(last=False)

    def frozen(self, now: float) -> frozenset[int]:
        """Return the blocks as a frozenset, refrozen when changed (rate-limited)."""
        if self.dirty and (now - self._built_at >= PREFIX_REBUILD_S or len(self._blocks) < 256):
            self._frozen = frozenset(self._blocks)
            self._built_at, self.dirty = now, False
        return self._frozen


class _Combined:
    """One endpoint's combined view and the figures ``with_own_flight`` built it from."""

    __slots__ = ("blocks", "decode", "load", "own", "prefill", "running")

    def __init__(
        self,
        running: int,
        prefill: float,
        decode: float,
        own: int | None,
        blocks: frozenset[int],
        load: EndpointLoad,
    ) -> None:
        self.running, self.prefill, self.decode = running, prefill, decode
        self.own, self.blocks, self.load = own, blocks, load

    def same(
        self, running: int, prefill: float, decode: float, own: int | None, blocks: frozenset[int]
    ) -> bool:
        """Tell whether ``load`` is what these figures build (``own``: None is not 0)."""
        return (
            self.blocks is blocks
            and self.running == running
            and self.prefill == prefill
            and self.decode == decode
            and self.own == own
        )


@dataclass(slots=True)
class Candidates:
    """What one region offers one request."""

    loads: tuple[EndpointLoad, ...] = ()
    full: int = 0  # eligible endpoints over their admission limit
    why: str = ""  # when ``loads`` is empty


@dataclass(slots=True)
class Gate:
    """Everything besides the heartbeats that decides whether an endpoint may be offered."""

    ledger: Ledger
    outlier: OutlierDetector
    drained: set[str]
    prefixes: dict[str, PrefixIndex]
    slow_start_s: float
    slow_start_floor: float
    rng: random.Random = field(default_factory=random.Random)
    # the other processes' in flight per endpoint (``shared``), replaced whole when merged
    peers: dict[str, PeerFlight] = field(default_factory=dict)
    # prompt blocks sent since the last publish, per endpoint (None: nothing is shared)
    outbox: dict[str, list[int]] | None = None

    def running(self, endpoint: str) -> int:
        """Return the requests in flight on ``endpoint``: this process's plus the others'."""
        peer = self.peers.get(endpoint)
        own = self.ledger.running(endpoint)
        return own if peer is None else own + peer[0]


class RegionView:
    """A region's heartbeat view, and the per-request candidates built from it."""

    def __init__(self, region: Region, state: RegionState, base: tuple[EndpointLoad, ...]):
        self.region = region
        self.state = state
        self.base = base
        self.slots = {
            b.endpoint.name: service_rates(b.profile, b.endpoint.gpus).max_concurrency for b in base
        }
        # endpoint → the combined load and the figures it was built from
        self._combined: dict[str, _Combined] = {}
        # model → (endpoints listing it, those of them the heartbeat lets serve it)
        self._serving: dict[str, tuple[int, tuple[EndpointLoad, ...]]] = {}
        # endpoint → this process's requests there when its heartbeat was first read, and
        # that heartbeat's receipt time
        self.own_at_report: dict[str, int] = {}
        self.received: dict[str, float] = {}
        self.peers = 0.0  # other processes like this one the heartbeats imply

    def note_reports(
        self,
        previous: RegionView | None,
        ledger: Ledger,
        received: Mapping[str, float],
        running: Callable[[str], int] | None = None,
    ) -> None:
        """Remember this process's count on each endpoint when its heartbeat was first read
        (``running``: its count merged with the other processes', when they are shared)."""
        count = running if running is not None else ledger.running
        old = previous.own_at_report if previous is not None else {}
        old_at = previous.received if previous is not None else {}
        for b in self.base:
            name = b.endpoint.name
            at = received.get(name)
            if at is None:
                continue
            kept = old.get(name)
            same = kept is not None and old_at.get(name) == at
            self.own_at_report[name] = kept if same and kept is not None else count(name)
            self.received[name] = at
        own = sum(self.own_at_report.values())
        reported = sum(b.running + b.waiting for b in self.base if b.endpoint.name in self.received)
        self.peers = peers(reported, own)

    def usable(self) -> set[str]:
        """Return the endpoints eligible by heartbeat and configuration (slow-start edges)."""
        return {
            b.endpoint.name
            for b in self.base
            if b.healthy and b.endpoint.weight > 0 and b.endpoint.admin_state is AdminState.ACTIVE
        }

    def combined(self, base: EndpointLoad, gate: Gate, now: float) -> EndpointLoad:
        """Return the endpoint's heartbeat view plus this process's in flight and blocks.

        Cached by the figures it is built from, not by the ledger's version: a request that
        came and went leaves the endpoint as it was, and its view need not be built again.
        """
        name = base.endpoint.name
        flight = gate.ledger.get(name)
        index = gate.prefixes.get(name)
        blocks = index.frozen(now) if index is not None else _NO_BLOCKS
        own = self.own_at_report.get(name)
        if flight is None:
            running, prefill, decode = 0, 0.0, 0.0
        else:
            running, prefill, decode = flight.running, flight.prefill, flight.decode
        peer = gate.peers.get(name)
        if peer is not None:  # the other processes' requests count as this one's
            running, prefill, decode = with_peers(running, prefill, decode, peer)
        if running == 0 and not own:
            running, prefill, decode, own = 0, 0.0, 0.0, None
        cached = self._combined.get(name)
        if cached is not None and cached.same(running, prefill, decode, own, blocks):
            return cached.load
        if running == 0 and own is None and not blocks:
            load = base
        else:
            load = with_own_flight(base, running, prefill, decode, blocks, own)
        self._combined[name] = _Combined(running, prefill, decode, own, blocks, load)
        return load

    def serving(self, model: str) -> tuple[int, tuple[EndpointLoad, ...]]:
        """Return how many endpoints list ``model``, and those the heartbeats let serve it.

        Both depend on the heartbeats only, so they are worked out once per view and model.
        """
        found = self._serving.get(model)
        if found is None:
            listing = [b for b in self.base if model in b.endpoint.models]
            found = (len(listing), tuple(b for b in listing if serves(b, model)))
            self._serving[model] = found
        return found

    def candidates(
        self,
        model: str,
        max_load: float,
        gate: Gate,
        now: float,
        subset: Callable[[EndpointLoad], bool] | None = None,
    ) -> Candidates:
        """Return the endpoints that may take a request for ``model`` now (see module doc)."""
        offered: list[EndpointLoad] = []
        ramping: list[tuple[float, EndpointLoad]] = []
        full, ejected = 0, 0
        outlier, drained, slots = gate.outlier, gate.drained, self.slots
        seen, serving = self.serving(model)
        for base in serving:
            name = base.endpoint.name
            if name in drained:
                continue
            if subset is not None and not subset(base):
                continue
            if not outlier.available(name, now):
                ejected += 1
                continue
            load = self.combined(base, gate, now)
            if load.running + load.waiting >= slots[name] * max_load:
                full += 1
                continue
            ramp = outlier.ramp(name, now, gate.slow_start_s, gate.slow_start_floor)
            if ramp < 1.0:
                ramping.append((ramp, load))
            else:
                offered.append(load)
        if ramping:  # slow start never refuses: it only shares
            offered = slow_start_offer(offered, ramping, gate.rng.random)
        if offered:
            return Candidates(tuple(offered), full)
        return Candidates((), full, self._why(model, seen, full, ejected))

    def _why(self, model: str, seen: int, full: int, ejected: int) -> str:
        if seen == 0:
            return f"no endpoint serves {model}"
        if full:
            return f"all {full} eligible endpoints serving {model} are at their admission limit"
        if ejected:
            return f"{ejected} of {seen} endpoints serving {model} ejected, the rest unavailable"
        return (
            f"none of the {seen} endpoints serving {model} is healthy, active, "
            "undrained and weighted"
        )
