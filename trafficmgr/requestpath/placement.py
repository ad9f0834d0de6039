"""One request's route: regions as ``/route`` orders them, an endpoint, and its fallbacks.

Regions: ``decision.region_candidates`` (the zone's weighted regions residency allows, one
drawn by weight from a hash of the client address and the model, then the rest, then the
reserve regions), limited to the core's region when it serves one. Residency is applied
there and nowhere loosened: a fallback is only ever an endpoint of a region in that list.

Endpoint, in the first region whose candidates (``regionview``) are not empty:

1. session affinity, when the request names a session: consistent hashing with bounded load
   over the region's endpoints serving the model (``affinity``);
2. otherwise the request's strategy, one engine picker per region and strategy, sharing what
   the process learned (``learning``).

Fallbacks: the region's other candidates, least loaded first (in flight per slot), then the
candidates of the next regions of the list, up to ``max_targets`` in all.

A client the fleet denies because it cannot be located: 403 ``client_location_unknown``.
No candidate anywhere: 429 ``saturated`` when some endpoint was only full (or the picker
shed a batch request for lack of headroom), else 503 ``no_capacity``; both with Retry-After.
A model's fallback chain (``model_fallbacks``) is tried in order before refusing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trafficmgr.requestpath.affinity import Ring, bounded_choice
from trafficmgr.requestpath.config import RequestPathConfig
from trafficmgr.requestpath.inflight import Ticket
from trafficmgr.requestpath.learning import Learner
from trafficmgr.requestpath.parse import Parsed
from trafficmgr.requestpath.regionview import Gate, PrefixIndex, RegionView
from trafficmgr.requestpath.snapshot import Snapshot
from trafficmgr.requestpath.types import Plan, Refusal, RequestInfo, Target
from trafficmgr.routing.decision import RegionCandidates, region_candidates
from trafficmgr.routing.picker import EndpointLoad, Picker
from trafficmgr.routing.types import ClientLocation, Priority, Request, WeightedRegion

Subset = Callable[[EndpointLoad], bool]
UNLOCATED_CODE = "client_location_unknown"
REGION_CACHE_SIZE = 65_536


class Router:
    """Route requests over a snapshot; holds the pickers and the affinity rings."""

    def __init__(self, config: RequestPathConfig, gate: Gate, learner: Learner, seed: int):
        self.config = config
        self.gate = gate
        self.learner = learner
        self.seed = seed
        self._pickers: dict[tuple[str, str], Picker] = {}
        self._rings: dict[tuple[str, str], Ring] = {}
        # (client address, model) → its regions: deterministic for a known client, so
        # computed once per snapshot (the engine's answer, remembered, not re-derived)
        self._regions: dict[tuple[str, str], _Regions] = {}
        # (name, address, region) → its Target: frozen, so one per snapshot serves every plan
        self._target_of: dict[tuple[str, str, str], Target] = {}
        self._snap: Snapshot | None = None

    def install(self, snap: Snapshot) -> None:
        """Use a new snapshot (pickers keep what they learned; rings follow the fleet)."""
        if self._snap is None or self._snap.fleet is not snap.fleet:
            self._rings.clear()
        self._regions.clear()
        self._target_of.clear()
        self._snap = snap

    def route(
        self,
        snap: Snapshot,
        info: RequestInfo,
        parsed: Parsed,
        client: ClientLocation | None,
        now: float,
    ) -> Plan | Refusal:
        """Route over the request's model, then its fallback chain (see the module doc)."""
        chain = (info.model, *self.config.model_fallbacks.get(info.model, ()))
        refusals: list[Refusal] = []
        for model in chain:
            if model not in snap.models:
                continue
            result = self._route_model(snap, info, parsed, model, client or ClientLocation(), now)
            if isinstance(result, Plan):
                if model != info.model:
                    reason = f"model fallback {info.model} -> {model} ({refusals[0].message}); "
                    return Plan(
                        model, result.targets, result.region, reason + result.reason, result.handle
                    )
                return result
            refusals.append(result)
        saturated = [r for r in refusals if r.code == "saturated"]
        return saturated[0] if saturated else refusals[0]

    def _route_model(
        self,
        snap: Snapshot,
        info: RequestInfo,
        parsed: Parsed,
        model: str,
        client: ClientLocation,
        now: float,
    ) -> Plan | Refusal:
        request = Request(
            model,
            client,
            parsed.input_tokens,
            parsed.max_output,
            parsed.priority,
            parsed.prefix_hashes,
        )
        found = self._region_candidates(snap, request, info.client_ip)
        entries = found.entries
        if found.denied:  # no location, no residency guarantee: refused, not retried later
            message = f"{model} cannot be served to this client: {found.note}"
            return Refusal(403, UNLOCATED_CODE, message)
        if not entries:
            why = found.note or f"region {self.config.region} is not allowed for this client"
            return self._refusal(503, "no_allowed_region", f"no allowed region for {model}: {why}")
        max_load = self._max_load(parsed.priority)
        subset = _subset(info.subset)
        tried: list[str] = []
        saturated = False
        for rank, entry in enumerate(entries):
            view = snap.regions.get(entry.region)
            if view is None:
                continue
            cands = view.candidates(model, max_load, self.gate, now, subset)
            saturated = saturated or cands.full > 0
            if not cands.loads:
                tried.append(f"{entry.region}: {cands.why}")
                continue
            chosen = self._choose(view, request, parsed.strategy, info.session_id, cands.loads, now)
            if isinstance(chosen, str):
                tried.append(f"{entry.region}: {chosen}")
                saturated = True  # the picker shed it for lack of headroom
                continue
            name, why, expected = chosen
            targets = self._targets(
                snap, entries, rank, name, cands.loads, model, max_load, subset, now
            )
            ticket = self._open(request, name, view.region.name, expected, now)
            lead = found.lead(rank)
            if tried:
                lead = f"{lead}; after {'; '.join(tried)}"
            return Plan(model, targets, entry.region, f"{lead}; endpoint {name}: {why}", ticket)
        if saturated:
            return self._refusal(
                429,
                "saturated",
                f"every endpoint that may serve {model} is busy: {'; '.join(tried)}",
            )
        return self._refusal(
            503, "no_capacity", f"no endpoint can take the request: {'; '.join(tried)}"
        )

    def _region_candidates(self, snap: Snapshot, request: Request, key: str | None) -> _Regions:
        if key is None:  # an unknown client is drawn at random each time
            found = region_candidates(snap.fleet, snap.table, request, None)
            return _Regions(found, self.config.region)
        cached = self._regions.get((key, request.model))
        if cached is None:
            if len(self._regions) > REGION_CACHE_SIZE:
                self._regions.clear()
            found = region_candidates(snap.fleet, snap.table, request, key)
            cached = self._regions[(key, request.model)] = _Regions(found, self.config.region)
        return cached

    def _max_load(self, priority: Priority) -> float:
        if priority is Priority.BATCH:
            return self.config.batch_max_load
        return self.config.max_load

    def _choose(
        self,
        view: RegionView,
        request: Request,
        strategy: str,
        session: str | None,
        loads: tuple[EndpointLoad, ...],
        now: float,
    ) -> tuple[str, str, float] | str:
        """Return (endpoint, reason, expected output tokens), or why the picker refused."""
        if session:
            held = self._affinity(view, request.model, session, loads)
            if held is not None:
                expected = self.learner.estimator.expected(
                    request.model, request.max_output_tokens, request.prefix_hashes
                )
                return held[0], held[1], expected
        pick = self._picker(view.region.name, strategy).pick(request, loads, now)
        if pick.endpoint is None:
            return pick.reason
        return pick.endpoint, pick.reason, pick.expected_output_tokens

    def _affinity(
        self, view: RegionView, model: str, session: str, loads: tuple[EndpointLoad, ...]
    ) -> tuple[str, str] | None:
        key = (view.region.name, model)
        ring = self._rings.get(key)
        if ring is None:
            names = [e.name for e in view.region.endpoints if model in e.models]
            ring = self._rings[key] = Ring(names)
        c = self.config.affinity_load_factor
        found = bounded_choice(
            ring, session, [x.endpoint.name for x in loads], self.gate.running, c
        )
        if found is None:
            return None
        name, rank = found
        where = (
            "its own endpoint"
            if rank == 0
            else (f"ring neighbour {rank} (its own is unavailable or at the load bound)")
        )
        return name, f"session affinity: {where}, consistent hashing with bounded load c={c:g}"

    def _picker(self, region: str, strategy: str) -> Picker:
        key = (region, strategy)
        picker = self._pickers.get(key)
        if picker is None:
            picker = self._pickers[key] = self.learner.picker(strategy, self.seed)
        return picker

    def _targets(
        self,
        snap: Snapshot,
        entries: Sequence[WeightedRegion],
        rank: int,
        chosen: str,
        loads: tuple[EndpointLoad, ...],
        model: str,
        max_load: float,
        subset: Subset | None,
        now: float,
    ) -> tuple[Target, ...]:
        """Return the pick, then the fallbacks (same region first, then the next regions)."""
        limit = max(1, self.config.max_targets)
        region = entries[rank].region
        out = [self._target(chosen, snap.endpoints[chosen].address, region)]
        views = [(region, loads)]
        for entry in entries[rank + 1 :]:
            if len(out) + sum(len(v) for _, v in views) > limit:
                break
            view = snap.regions.get(entry.region)
            if view is not None:
                views.append(
                    (entry.region, view.candidates(model, max_load, self.gate, now, subset).loads)
                )
        for name, region_loads in views:
            rest = [x for x in region_loads if x.endpoint.name != chosen]
            if len(rest) > 1:
                slots = snap.regions[name].slots
                rest.sort(key=lambda x: (x.running + x.waiting) / max(1, slots[x.endpoint.name]))
            for load in rest:
                if len(out) >= limit:
                    return tuple(out)
                out.append(self._target(load.endpoint.name, load.endpoint.address, name))
        return tuple(out)

    def _target(self, name: str, address: str, region: str) -> Target:
        """Return the (frozen, shared) Target: one fewer object built per plan and fallback."""
        key = (name, address, region)
        found = self._target_of.get(key)
        if found is None:
            found = self._target_of[key] = Target(name, address, region)
        return found

    def _open(
        self, request: Request, endpoint: str, region: str, expected: float, now: float
    ) -> Ticket:
        ticket = Ticket(
            request.model,
            request.input_tokens,
            request.prefix_hashes,
            expected,
            request.max_output_tokens,
            request.priority,
            now,
        )
        self._attach(ticket, endpoint, region, now)
        return ticket

    def move(self, ticket: Ticket, endpoint: str, now: float) -> None:
        """Account ``ticket`` on ``endpoint`` (a name or an address) from now on."""
        snap = self._snap
        if snap is None:
            return
        name = endpoint if endpoint in snap.endpoints else snap.addresses.get(endpoint)
        if name is None:
            return
        ticket.sent_at = now
        if name == ticket.endpoint:
            return
        if ticket.endpoint is not None:
            self.gate.outlier.released(ticket.endpoint, ticket.probe)
        self._attach(ticket, name, snap.endpoints[name].region, now)

    def _attach(self, ticket: Ticket, endpoint: str, region: str, now: float) -> None:
        self.gate.ledger.attach(ticket, endpoint, region)
        ticket.probe = self.gate.outlier.sent(endpoint, now)
        if ticket.prefix_hashes:
            index = self.gate.prefixes.get(endpoint)
            if index is None:
                limit = self.config.prefix_blocks_per_endpoint
                index = self.gate.prefixes[endpoint] = PrefixIndex(limit)
            index.add(ticket.prefix_hashes)
            outbox = self.gate.outbox
            if outbox is not None:  # shared with the other processes at the next publish
                sent = outbox.get(endpoint)
                if sent is None:
                    outbox[endpoint] = list(ticket.prefix_hashes)
                elif len(sent) < self.config.prefix_blocks_per_endpoint:
                    sent.extend(ticket.prefix_hashes)

    def _refusal(self, status: int, code: str, message: str) -> Refusal:
        return Refusal(status, code, message, self.config.retry_after_s)


class _Regions:
    """A request's regions as ``decision.region_candidates`` ordered them, limited to the
    core's region, with each one's lead of the plan's reason (formatted once, then kept)."""

    __slots__ = ("_leads", "denied", "entries", "note")

    def __init__(self, found: RegionCandidates, region: str | None) -> None:
        entries = found.regions
        if region is not None:
            entries = tuple(e for e in entries if e.region == region)
        self.entries: tuple[WeightedRegion, ...] = entries
        self.note = found.note
        self.denied = found.denied
        self._leads: list[str | None] = [None] * len(entries)

    def lead(self, rank: int) -> str:
        """Return why the region at ``rank`` was tried, as the plan's reason begins."""
        found = self._leads[rank]
        if found is None:
            entry = self.entries[rank]
            found = self._leads[rank] = (
                f"region {entry.region} ({'weighted pick' if rank == 0 else 'fallback'}, "
                f"weight {entry.weight:g}): {entry.reason}"
            )
        return found


def _subset(names: frozenset[str] | None) -> Subset | None:
    if names is None:
        return None
    return lambda load: load.endpoint.name in names or load.endpoint.address in names
