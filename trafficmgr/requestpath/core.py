"""``RequestPath``: the decision core the gateway and the endpoint picker share.

One instance per process (per gateway worker). ``decide`` routes one request: the regions
exactly as ``POST /api/v1/route`` orders them (``decision.region_candidates``: residency
first, never violated), then inside the first region that can take it the endpoint the
request's strategy picks (``routing.picker``) over the heartbeats plus this process's own
in-flight view (``regionview``), with session affinity before the picker and an ordered
fallback list after it (``placement``). It counts the request in flight on its pick and
returns a ``Plan`` whose ``handle`` the front hands back as the request goes on: ``served``
(an attempt is sent to an endpoint: the pick, or a fallback on retry), ``attempt_failed``
(an attempt failed before its first byte), ``progress`` (output tokens arrived) and exactly
one ``finished``. Failures feed the outlier detector; completions feed the pickers in process
and, through ``maintain``, the control plane.

Several processes (gateway workers, picker replicas) share their in-flight work, prompt
blocks, ejections and slow-start ramps through Redis when ``config.sharing`` is set
(``shared.store``: ``own_part`` and ``merge_shared`` run on its thread, never on the path).

Thread safety: every public method takes one lock, so a threaded front may call them from
several threads; ``admit`` (the admission queue) must run on one asyncio event loop.
``maintain`` does the source's I/O outside the lock and should run off the request path.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from trafficmgr.contracts import Completion, SharedBlocks, SharedProcess, shared_part
from trafficmgr.requestpath.admission import AdmissionQueue
from trafficmgr.requestpath.config import RequestPathConfig
from trafficmgr.requestpath.inflight import Ledger, Ticket
from trafficmgr.requestpath.learning import Learner
from trafficmgr.requestpath.outlier import EjectionPolicy, OutlierDetector
from trafficmgr.requestpath.parse import parse_info
from trafficmgr.requestpath.placement import Router
from trafficmgr.requestpath.regionview import Gate, PrefixIndex
from trafficmgr.requestpath.shared.config import Sharing
from trafficmgr.requestpath.snapshot import Snapshot, StaticTables, read_snapshot
from trafficmgr.requestpath.source import ControlPlane
from trafficmgr.requestpath.tokens import ShapedTokens, TokenGate, plausible
from trafficmgr.requestpath.types import (
    ClientIdentity,
    Outcome,
    Plan,
    Refusal,
    RequestInfo,
    Usage,
)
from trafficmgr.routing.sharedstate import Merged, merge_blocks
from trafficmgr.routing.types import ClientLocation, Priority

LOCATION_CACHE_SIZE = 65_536


class RequestPath:
    """Route requests, account for them in flight, eject failing endpoints (module doc)."""

    def __init__(
        self,
        source: ControlPlane,
        config: RequestPathConfig | None = None,
        *,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.config = config or RequestPathConfig()
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._maintain_lock = threading.Lock()
        self._statics = StaticTables()
        self._snapshot: Snapshot | None = None
        self._read_at = -math.inf
        self.learner = Learner()
        self.ledger = Ledger()
        cfg = self.config
        self.outlier = OutlierDetector(
            EjectionPolicy(
                cfg.consecutive_failures,
                cfg.base_ejection_s,
                cfg.max_ejection_s,
                cfg.max_ejected_share,
            )
        )
        self.queue = AdmissionQueue(cfg.queue_limit)
        self._gate = Gate(
            self.ledger,
            self.outlier,
            set(),
            {},
            0.0,
            cfg.slow_start_floor,
            random.Random(seed),
        )
        self._router = Router(cfg, self._gate, self.learner, seed or 0)
        limits = replace(
            cfg.token_limits, ttl_s=cfg.auth_ttl_s, negative_ttl_s=cfg.auth_negative_ttl_s
        )
        shape = source.well_formed if isinstance(source, ShapedTokens) else plausible
        self.tokens = TokenGate(source.authenticate, shape, limits, clock)
        self._locations: dict[str, ClientLocation] = {}
        self._usable: set[str] | None = None
        self.rejects: dict[str, int] = {}
        # told of every routed request (the shared state's publisher counts them; no I/O)
        self.on_decided: Callable[[], None] | None = None
        self.sharing: Sharing | None = None  # the shared state's publisher, for reports

    # --- control-plane view ---------------------------------------------------------------

    def maintain(self) -> None:
        """Read the control plane again and report completions (blocking I/O; off-path)."""
        with self._maintain_lock:
            snap = read_snapshot(self.source, self.config.region, self._wall(), self._statics)
            streams = {}
            for name in snap.regions:
                after, count = self.learner.stream_after(name)
                try:
                    streams[name] = self.source.completions(name, after, count)
                except Exception:  # learning is optional: the next read catches up
                    continue
            with self._lock:
                self._install(snap)
                for name, entries in streams.items():
                    self.learner.learn_stream(name, entries)
                reports = self.learner.drain_reports()
            batch = self.config.report_batch
            for start in range(0, len(reports), batch):
                self.source.report_completions(reports[start : start + batch])

    def _install(self, snap: Snapshot) -> None:
        """Swap in a new view; start slow start for endpoints that joined or came back."""
        now = self._clock()
        usable: set[str] = set()
        before = self._snapshot.regions if self._snapshot is not None else {}
        for view in snap.regions.values():
            usable |= view.usable()
            beats = snap.beats.get(view.region.name, {})
            self.learner.learn_heartbeats(view.region, beats)
            received = {name: hb.received_at for name, hb in beats.items()}
            view.note_reports(
                before.get(view.region.name), self.ledger, received, self._gate.running
            )
        if self._usable is not None:
            for name in usable - self._usable:
                self.outlier.joined(name, now)
        self._usable = usable
        self.outlier.set_pools(snap.pools)
        self.outlier.forget(set(snap.endpoints))
        self._gate.slow_start_s = (
            self.config.slow_start_s
            if self.config.slow_start_s is not None
            else snap.fleet.failover.slow_start_s
        )
        self._router.install(snap)
        self._snapshot, self._read_at = snap, now

    def snapshot(self) -> Snapshot:
        """Return the current view, reading it first if there is none yet."""
        snap = self._snapshot
        if snap is None:
            self.maintain()
            snap = self._snapshot
            assert snap is not None
        return snap

    def stale(self) -> bool:
        """Tell whether the view is older than ``loads_ttl_s`` (time to ``maintain``)."""
        return self._clock() - self._read_at >= self.config.loads_ttl_s

    def models(self) -> tuple[str, ...]:
        """Return the models the fleet serves."""
        return tuple(sorted(self.snapshot().models))

    # --- clients --------------------------------------------------------------------------

    def cached_identity(self, token: str) -> tuple[bool, ClientIdentity | None]:
        """Return (known, identity) for ``token`` without I/O; not known: ``authenticate``.

        A token not shaped like one the source issues is known at once: it is no one."""
        return self.tokens.cached(token)

    def authenticate(self, token: str) -> ClientIdentity | None:
        """Ask the source who ``token`` belongs to (may block); the answer is cached."""
        return self.tokens.lookup(token)

    async def identify(self, token: str | None, client: str | None) -> ClientIdentity | Refusal:
        """Return who ``token`` belongs to, or the 401, 429 or 503 to answer (``tokens``)."""
        return await self.tokens.identify(token, client)

    # --- decisions ------------------------------------------------------------------------

    def decide(self, info: RequestInfo) -> Plan | Refusal:
        """Route one request now (never waits); count it in flight when routed."""
        return self._counted(self._decide(info))

    def _decide(self, info: RequestInfo) -> Plan | Refusal:
        start = time.perf_counter()
        snap = self.snapshot()
        parsed = parse_info(info, self.config.default_strategy, snap.models)
        if isinstance(parsed, Refusal):
            return parsed
        client = info.location
        if client is None and info.client_ip:
            client = self._locate(info.client_ip)
        with self._lock:
            result = self._router.route(snap, info, parsed, client, self._clock())
        if isinstance(result, Refusal):
            return result
        ticket = _ticket(result.handle)
        ticket.request_id = info.request_id
        ticket.identity = info.identity.name if info.identity else None
        if self.on_decided is not None:
            self.on_decided()
        # a constructor call: ``dataclasses.replace`` costs several times more per request
        return Plan(
            result.model,
            result.targets,
            result.region,
            result.reason,
            result.handle,
            time.perf_counter() - start,
            result.queued_s,
        )

    def ramping_since(self, endpoint: str, since: float) -> None:
        """Start ``endpoint``'s slow start at ``since`` (this core's clock): when the control
        loop recorded its return, for a core that did not see it go (a new process)."""
        with self._lock:
            self.outlier.joined(endpoint, since)

    def warm(self) -> None:
        """Do the source's one-time set-up now rather than on a first request (blocking I/O:
        call it off the request path; the source may, e.g., open its GeoIP database)."""
        self.source.locate("127.0.0.1")

    def _locate(self, ip: str) -> ClientLocation:
        found = self._locations.get(ip)
        if found is None:
            if len(self._locations) > LOCATION_CACHE_SIZE:
                self._locations.clear()
            found = self._locations[ip] = self.source.locate(ip)
        return found

    async def admit(self, info: RequestInfo) -> Plan | Refusal:
        """Route one request, waiting in the admission queue while every endpoint is full.

        The wait is real time (``time.monotonic``), whatever clock the core was given.
        """
        result = self._decide(info)
        if not isinstance(result, Refusal) or result.code != "saturated":
            return self._counted(result)
        batch = info.priority == Priority.BATCH.value
        priority = Priority.BATCH if batch else Priority.INTERACTIVE
        cfg = self.config
        began = time.monotonic()
        deadline = began + (cfg.batch_wait_s if batch else cfg.interactive_wait_s)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not await self.queue.wait(priority, left):
                waited = time.monotonic() - began
                message = f"{result.message}; waited {waited:.1f} s ({priority.value})"
                return self._counted(replace(result, message=message))
            result = self._decide(info)
            if isinstance(result, Plan):
                return replace(result, queued_s=time.monotonic() - began)
            if result.code != "saturated":
                return self._counted(result)

    # --- a request's life -----------------------------------------------------------------

    def served(self, handle: object, endpoint: str) -> None:
        """Record that an attempt is sent to ``endpoint`` (a name or ``host:port``)."""
        ticket = _ticket(handle)
        with self._lock:
            if ticket.closed:
                return
            self._router.move(ticket, endpoint, self._clock())

    def attempt_failed(self, handle: object, outcome: Outcome) -> None:
        """Record that the current attempt failed before its first byte (about to retry)."""
        ticket = _ticket(handle)
        with self._lock:
            if ticket.closed or ticket.endpoint is None:
                return
            self._judge(ticket.endpoint, ticket.probe, outcome)
            self.ledger.detach(ticket)
        self.queue.wake()

    def progress(self, handle: object, tokens: int) -> None:
        """Record ``tokens`` more output tokens (the first ones also vouch for the endpoint)."""
        ticket = _ticket(handle)
        with self._lock:
            if ticket.closed:
                return
            now = self._clock()
            if self.ledger.progress(ticket, tokens, now) and ticket.endpoint is not None:
                self.outlier.succeeded(ticket.endpoint, now)

    def finished(self, handle: object, usage: Usage | None, outcome: Outcome) -> None:
        """Close the request's accounting; later calls for the same handle do nothing."""
        ticket = _ticket(handle)
        with self._lock:
            if ticket.closed:
                return
            ticket.closed = True
            endpoint, now = ticket.endpoint, self._clock()
            if endpoint is not None:
                self._judge(endpoint, ticket.probe, outcome)
                self.ledger.detach(ticket)
                if outcome is Outcome.OK:
                    self._learn(ticket, endpoint, usage, now)
        self.queue.wake()

    def _judge(self, endpoint: str, probe: bool, outcome: Outcome) -> None:
        now = self._clock()
        if outcome.is_failure:
            self.outlier.failed(endpoint, now)
        elif outcome in (Outcome.OK, Outcome.CLIENT_ERROR):
            self.outlier.succeeded(endpoint, now)
            self.outlier.released(endpoint, probe)
        else:
            self.outlier.released(endpoint, probe)

    def _learn(self, ticket: Ticket, endpoint: str, usage: Usage | None, now: float) -> None:
        output = usage.completion_tokens if usage is not None else ticket.generated
        self.learner.completed(
            Completion(
                endpoint,
                ticket.model,
                ticket.input_tokens,
                output,
                max(1e-6, now - ticket.sent_at),
                ticket.prefix_hashes,
            )
        )

    # --- operations -----------------------------------------------------------------------

    def drain(self, endpoint: str) -> None:
        """Send no new request to ``endpoint`` from this process; in-flight ones finish."""
        with self._lock:
            self._gate.drained.add(endpoint)

    def undrain(self, endpoint: str) -> None:
        """Take ``endpoint`` back (it ramps up again: slow start)."""
        with self._lock:
            if endpoint in self._gate.drained:
                self._gate.drained.discard(endpoint)
                self.outlier.joined(endpoint, self._clock())

    # --- shared state (``requestpath.shared``; called by its publisher, off the path) -----

    def share_blocks(self) -> None:
        """Collect the prompt blocks sent from now on, for the other processes."""
        with self._lock:
            if self._gate.outbox is None:
                self._gate.outbox = {}

    def own_part(self, pid: str, wall: float) -> tuple[SharedProcess, SharedBlocks]:
        """Return this process's part of the shared state and the blocks sent since last."""
        with self._lock:
            now = self._clock()
            to_wall = wall - now
            flight = [(n, f.running, f.prefill, f.decode) for n, f in self.ledger.endpoints()]
            ejected = {
                n: (until + to_wall, probing)
                for n, (until, probing) in self.outlier.own_ejections().items()
            }
            ramps = {
                n: since + to_wall
                for n, since in self.outlier.ramps(now, self._gate.slow_start_s).items()
            }
            blocks = self._gate.outbox or {}
            if self._gate.outbox is not None:
                self._gate.outbox = {}
        return shared_part(pid, wall, flight, ejected, ramps), blocks

    def merge_shared(
        self, merged: Merged, wall: float, batches: list[tuple[str, SharedBlocks]], pid: str
    ) -> None:
        """Take the other processes' parts (``merge_parts``) and blocks into this view."""
        with self._lock:
            now = self._clock()
            to_mono = now - wall
            self._gate.peers = merged.flight
            for name, (until, probing) in merged.ejected.items():
                self.outlier.adopt(name, until + to_mono, probing, now)
            self.outlier.release_adopted(set(merged.ejected), now)
            for name, since in merged.ramps.items():
                if not self.outlier.ejected(name, now):
                    self.outlier.ramp_from(name, since + to_mono)
            merge_blocks(batches, pid, self._add_blocks)

    def _add_blocks(self, endpoint: str, hashes: list[int]) -> None:
        index = self._gate.prefixes.get(endpoint)
        if index is None:
            if self._snapshot is not None and endpoint not in self._snapshot.endpoints:
                return  # not in this fleet: foreign or stale, not remembered
            limit = self.config.prefix_blocks_per_endpoint
            index = self._gate.prefixes[endpoint] = PrefixIndex(limit)
        index.add(hashes)

    def peer_in_flight(self) -> int:
        """Return the other processes' requests in flight, as merged last."""
        return sum(f[0] for f in self._gate.peers.values())

    def forget_peers(self) -> None:
        """Decide from this process's own view alone (the shared state is out of reach)."""
        with self._lock:
            self._gate.peers = {}
            self.outlier.release_adopted(set(), self._clock())

    def in_flight(self) -> dict[str, int]:
        """Return this process's requests in flight per endpoint."""
        with self._lock:
            return {n: f.running for n, f in self.ledger.endpoints()}

    def _counted(self, result: Plan | Refusal) -> Plan | Refusal:
        if isinstance(result, Refusal):
            self.rejects[result.code] = self.rejects.get(result.code, 0) + 1
        return result


def _ticket(handle: object) -> Ticket:
    if not isinstance(handle, Ticket):
        raise TypeError("not a handle this core issued")
    return handle
