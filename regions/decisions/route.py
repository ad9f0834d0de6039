"""The L7 decision (``POST /api/v1/route``): a region from the published table, an endpoint
inside it from live GPU state.

Region: the engine's ``lookup`` gives the client's weighted regions (residency already
applied; fail_closed gives none). One is drawn by weight: deterministically from a hash of
``client_ip`` and the model when the client address is known, so one client keeps landing in
the same region while the weights hold; at random for ``client_country`` requests, since a
country is not a client. If no endpoint of the drawn region can take the request, the other
regions of the list are tried by weight, then regions residency allows that the list leaves
out (``reserve_regions``: the one-tick gap before the table catches up with a failure). No
list, no answer (503).
A region the list names while it is down (all allowed regions down, fail_open) is served
like one without evidence: its active endpoints by configuration and load.

Endpoint: the engine's ``ai_aware`` picker over ``EndpointLoad`` built from the latest
heartbeats and the engine's ``endpoint_health``. A region's candidate list is rebuilt at
most every ``LOADS_TTL_S``; in between the picker adds the work it sent to its own figures,
so a burst between two heartbeats is spread instead of piling on one endpoint. The picker's
expected output length is learned from the servers' own histograms of generated tokens
(``server.output_tokens`` in heartbeats, cumulative since each server started): each rebuild
feeds the region's estimator what the counts grew by since this process last saw them (all
of them on first sight, or after a server restart made them go down). Before a
region has any evidence (state ``unknown``, e.g. before the first tick) its endpoints count
as healthy by configuration, as the table does.

Slow start and weights, by the rules the gateway's core uses (``routing.slowstart``; the
picker's ``serves`` leaves out endpoints of weight 0): an endpoint back from an outage ramps
from ``slowstart.DEFAULT_FLOOR`` to its full share over the fleet's ``slow_start_s``, each
decision offering it to the picker with its ramp's probability. When it came back is the
control loop's record (``since`` per endpoint in the stored evaluation, read with the
heartbeats); one this process judges healthy while the record says down is coming back now.
The heartbeats' queues weigh in the picker's cost through ``build_loads``, which estimates
the outstanding work a server reports (``routing.reported``): this process has no in-flight
view of its own.

Completions gateways report (``regions.decisions.completions``, ``POST /api/v1/route/completions``)
teach the picker more: output length per prompt prefix and per prompt size, and the service's
latency tail. They reach one web process, so they are kept in the hot state as a bounded
stream per region; each rebuild feeds the picker the entries of its region's stream this
process has not fed yet (at most ``COMPLETIONS_PER_READ``, by stream id, so none twice; one
non-blocking read per rebuild, as for the heartbeats). A process's first look at a region
replays the stream's latest ``COMPLETIONS_REPLAY``. A region's picker, estimator and what
they were fed are kept when the fleet view or the table changes (every ``snapshot.MAX_AGE_S``
at least): only a new process, or ``forget``, starts one from nothing.

The regions' pickers share one output-length estimator and one latency tail per process, as
in the simulator: how long answers are does not depend on the region, and the tail a
balancing move must stay within is the one users see, the whole service's. So they share one
lock too (``_learning``): a pick takes ~25 µs.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from regions import conf, hotstate, metrics
from regions.decisions.ramps import Ramps, recorded_health
from regions.errors import DomainError, bad_input
from regions.fleet import snapshot
from regions.validation import Field, Invalid, integer, obj, parse_json, string, validate
from trafficmgr.contracts import StreamEntry, stream_position
from trafficmgr.routing.countries import continent_of
from trafficmgr.routing.decision import build_loads, histogram_delta, region_candidates
from trafficmgr.routing.estimator import LatencyTail, OutputLengthEstimator
from trafficmgr.routing.geo import Locator, country_location
from trafficmgr.routing.picker import EndpointLoad, Picker, make_picker
from trafficmgr.routing.types import (
    ClientLocation,
    Heartbeat,
    OutputHistogram,
    Priority,
    Region,
    RegionState,
    Request,
    RoutingTable,
)

MAX_TOKENS = 1_000_000
LOADS_TTL_S = 0.5
MAX_BODY_BYTES = 64 * 1024
PREFIX_HASHES = ("list", integer(-(2**63), 2**64 - 1), 1024)
# Reported completions a process feeds a region's picker: on its first look at the region
# the stream's latest (a worker that starts knows what the others learned lately), then per
# rebuild what is new, at most this many (a backlog is caught up over the next rebuilds).
COMPLETIONS_REPLAY = 2_000
COMPLETIONS_PER_READ = 2_000

ROUTE_BODY = obj(
    {
        "model": Field(string(63)),
        "client_ip": Field(string(45), required=False),
        "client_country": Field(string(2, 2), required=False),
        "input_tokens": Field(integer(1, MAX_TOKENS)),
        "max_output_tokens": Field(integer(1, MAX_TOKENS)),
        "priority": Field(
            ("choice", tuple(p.value for p in Priority)),
            required=False,
            default=Priority.INTERACTIVE.value,
        ),
        "prefix_hashes": Field(PREFIX_HASHES, required=False, default=[]),
    }
)


class NoCapacity(DomainError):
    """No allowed region has an endpoint that can take the request."""

    status_code = 503
    code = "no_capacity"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Decision:
    region: str
    endpoint: str
    address: str
    table_version: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "endpoint": self.endpoint,
            "address": self.address,
            "table_version": self.table_version,
            "reason": self.reason,
        }


@dataclass(slots=True)
class _RegionLoads:
    key: tuple[int, str]  # (id of the fleet view, table version)
    built: float  # time.monotonic()
    loads: tuple[EndpointLoad, ...]
    picker: Picker
    lock: threading.Lock  # guards the picker, its estimator and ``fed`` (shared: _learning)
    estimator: OutputLengthEstimator
    # per endpoint, when its last heartbeat fed the estimator and its histograms then, by model
    fed: dict[str, tuple[float, dict[str, OutputHistogram]]]
    completions_at: str | None = None  # id of the last reported completion fed to the picker
    ramps: Ramps = field(default_factory=Ramps)  # endpoints in their slow start


log = logging.getLogger(__name__)
_loads: dict[str, _RegionLoads] = {}
_loads_lock = threading.Lock()


@dataclass(slots=True)
class _Learning:
    """What every region's picker in this process learns into, and the lock guarding it."""

    estimator: OutputLengthEstimator
    tail: LatencyTail
    lock: threading.Lock


def _new_learning() -> _Learning:
    return _Learning(OutputLengthEstimator(), LatencyTail(), threading.Lock())


_learning = _new_learning()
_locator: Locator | None = None
_locator_lock = threading.Lock()


def locate_ip(ip: str) -> ClientLocation:
    """Locate a client address with the GeoIP database (opened once per process)."""
    global _locator
    with _locator_lock:
        if _locator is None:
            _locator = Locator(conf.geoip_db())
        return _locator.locate(ip)


def parse_request(body: bytes) -> tuple[Request, str | None]:
    """Validate a route body; return the engine request and the client key (its address)."""
    if len(body) > MAX_BODY_BYTES:
        raise DomainError(
            f"route body larger than {MAX_BODY_BYTES} bytes", code="too_large", status_code=413
        )
    with bad_input():
        doc = validate(ROUTE_BODY, parse_json(body))
        client, key = _client(doc)
    request = Request(
        doc["model"],
        client,
        doc["input_tokens"],
        doc["max_output_tokens"],
        Priority(doc["priority"]),
        tuple(doc["prefix_hashes"]),
    )
    return request, key


def _client(doc: dict[str, Any]) -> tuple[ClientLocation, str | None]:
    ip, country = doc.get("client_ip"), doc.get("client_country")
    if ip is not None and country is not None:
        raise Invalid("client_country", "give client_ip or client_country, not both")
    if ip is not None:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            raise Invalid("client_ip", f"{ip!r} is not an IPv4 or IPv6 address") from None
        return locate_ip(str(address)), str(address)
    if country is not None:
        if country != country.upper() or continent_of(country) is None:
            raise Invalid(
                "client_country", f"{country!r} is not an upper-case ISO 3166-1 alpha-2 code"
            )
        return country_location(country), None
    raise Invalid("client_ip", "give client_ip or client_country")


def current_table(view: snapshot.FleetView, now: float) -> tuple[RoutingTable, str]:
    """Return the published table, or the static one before the first tick, and which."""
    table = hotstate.get().table()
    if table is not None:
        return table, "published"
    return view.static_table(now), "static"


def retry_after_s() -> int:
    """Seconds until a new table could change the answer: one tick, at least 1."""
    return max(1, math.ceil(conf.tick_seconds()))


def decide(
    body: bytes, now: float | None = None, view: snapshot.FleetView | None = None
) -> Decision:
    """Route one request; raise DomainError (400) or NoCapacity (503).

    ``view`` is the fleet to route over (default: ``snapshot.current()``, which may read the
    database; the ASGI front passes a view it keeps fresh itself).
    """
    request, key = parse_request(body)
    at = time.time() if now is None else now
    view = snapshot.current() if view is None else view
    fleet = view.fleet
    if request.model not in view.models:
        raise DomainError(
            f"model: unknown model {request.model!r}",
            code="invalid",
            fields={"model": [f"no endpoint serves {request.model!r}"]},
            status_code=400,
        )
    table, _ = current_table(view, at)
    found = region_candidates(fleet, table, request, key)
    if not found.regions:
        metrics.count_decision("", "", "no_allowed_region")
        raise NoCapacity(f"no allowed region for {request.model}: {found.note}", retry_after_s())
    tried: list[str] = []
    for rank, entry in enumerate(found.regions):
        region = fleet.region(entry.region)
        loads = region_loads(view, table, region, at)
        with loads.lock:
            pick = loads.picker.pick(request, loads.ramps.offer(loads.loads, at), at)
        if pick.endpoint is None:
            tried.append(f"{region.name}: {pick.reason}")
            continue
        endpoint = next(e for e in region.endpoints if e.name == pick.endpoint)
        share = loads.ramps.share(endpoint.name, at)
        ramped = f"; slow start {share:.0%}" if share < 1.0 else ""
        outcome = "weighted" if rank == 0 else "fallback"
        metrics.count_decision(region.name, endpoint.name, outcome)
        lead = (
            f"region {region.name} ({'weighted pick' if rank == 0 else 'fallback'}, "
            f"weight {entry.weight:g}): {entry.reason}"
        )
        if tried:
            lead = f"{lead}; after {'; '.join(tried)}"
        return Decision(
            region.name,
            endpoint.name,
            endpoint.address,
            table.version,
            f"{lead}; endpoint {endpoint.name}: {pick.reason}{ramped}",
        )
    metrics.count_decision("", "", "no_capacity")
    raise NoCapacity(f"no endpoint can take the request: {'; '.join(tried)}", retry_after_s())


def region_loads(
    view: snapshot.FleetView, table: RoutingTable, region: Region, now: float
) -> _RegionLoads:
    """Return the region's candidates and picker, rebuilt when stale."""
    key = (id(view), table.version)
    found = _loads.get(region.name)
    if found is not None and found.key == key and time.monotonic() - found.built < LOADS_TTL_S:
        return found
    status = table.regions.get(region.name)
    # Unknown: endpoints without evidence yet count by configuration. Down yet listed: the
    # table answers fail_open, so every active endpoint counts.
    state = status.state if status is not None else RegionState.UNKNOWN
    beats = hotstate.get().heartbeats([e.name for e in region.endpoints])
    loads = build_loads(view.fleet, region, state, now, beats)
    ramps = Ramps.of(loads, recorded_health(), now, view.fleet.failover.slow_start_s)
    with _loads_lock:
        found = _loads.get(region.name)
        if found is None:
            shared = _learning
            picker = make_picker("ai_aware", estimator=shared.estimator, tail=shared.tail)
            found = _RegionLoads(
                key, time.monotonic(), loads, picker, shared.lock, shared.estimator, {}
            )
            _loads[region.name] = found
        else:  # a new fleet view or table keeps what the picker learned
            found.key, found.built, found.loads = key, time.monotonic(), loads
        found.ramps = ramps
    reported = read_completions(region.name, found.completions_at)
    with found.lock:
        learn_output_lengths(found, region, beats)
        if reported is not None:
            learn_completions(found, reported)
    return found


def read_completions(region: str, after: str | None) -> list[StreamEntry] | None:
    """Read the region's reported completions after ``after`` (None: the latest few).

    A failed read is logged and gives None: the decision does not need it, and the next
    rebuild reads again from the same place.
    """
    count = COMPLETIONS_REPLAY if after is None else COMPLETIONS_PER_READ
    try:
        return hotstate.get().completions(region, after, count)
    except Exception:
        log.warning("reading the reported completions of %s failed", region, exc_info=True)
        return None


def learn_completions(loads: _RegionLoads, entries: Sequence[StreamEntry]) -> None:
    """Feed the region's picker reported completions it has not seen yet.

    Call with ``loads.lock`` held. Entries at or before the last one fed are skipped (a
    concurrent rebuild read the stream first), so none is counted twice.
    """
    last = stream_position(loads.completions_at) if loads.completions_at is not None else None
    observe = loads.picker.observe
    for entry_id, c in entries:
        at = stream_position(entry_id)
        if last is not None and at <= last:
            continue
        observe(
            c.model,
            c.output_tokens,
            input_tokens=c.input_tokens,
            prefix_hashes=c.prefix_hashes,
            latency_s=c.latency_s,
        )
        last = at
        loads.completions_at = entry_id
    if loads.completions_at is None:
        loads.completions_at = "0-0"  # an empty stream: everything reported from now on


def learn_output_lengths(
    loads: _RegionLoads, region: Region, beats: Mapping[str, Heartbeat]
) -> None:
    """Feed the region's estimator the output lengths its servers counted since last time.

    Call with ``loads.lock`` held. A heartbeat already fed (or older than it: a concurrent
    rebuild read the store first) is skipped, so nothing is counted twice.
    """
    for e in region.endpoints:
        hb = beats.get(e.name)
        if hb is None or hb.server is None or not hb.server.output_tokens:
            continue
        last = loads.fed.get(e.name)
        if last is not None and hb.received_at <= last[0]:
            continue
        before = last[1] if last is not None else {}
        now_seen: dict[str, OutputHistogram] = {}
        for h in hb.server.output_tokens:
            if h.model not in e.models:
                continue  # a model the fleet does not route to this endpoint
            counts, count = histogram_delta(h, before.get(h.model))
            if count > 0:
                loads.estimator.observe_histogram(h.model, h.le, counts, count)
            now_seen[h.model] = h
        loads.fed[e.name] = (hb.received_at, now_seen)


def forget() -> None:
    """Drop cached candidates and pickers, and what they learned (tests)."""
    global _learning
    with _loads_lock:
        _loads.clear()
        _learning = _new_learning()
