"""The L7 decision (``POST /api/v1/route``) through the request path's shared core.

The gateway and the endpoint picker decide with ``trafficmgr.requestpath.RequestPath``; so does
this view, over the control plane they use (``source.DjangoControlPlane``: the stored fleet,
the published table, the latest heartbeats, the reported completions). One region walk
(residency first, never violated; a client address keeps its region while the weights hold,
a ``client_country`` request is drawn at random by weight; then the list's other regions,
then the reserve ones), one slow start, one learner (output lengths from the servers'
histograms and from the completions gateways report, one estimator and latency tail per
process), one picker (``ai_aware``).

What differs from the fronts: nothing is proxied, so nothing is tracked in flight (a
decision is closed as soon as it is made; the heartbeats carry the load), and this process
did not see the endpoints go down, so slow start also follows the control loop's record of
when each came back (``ramps.recorded_health``). The view is read again when the fleet view
or the published table changes, and at least every ``LOADS_TTL_S``.

The body: ``model``, ``client_ip`` or ``client_country``, ``input_tokens``,
``max_output_tokens``, ``priority``, ``prefix_hashes``. The answer: region, endpoint,
address, table version, reason; 503 with Retry-After when no allowed region has capacity.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from regions import conf, hotstate, metrics
from regions.decisions.ramps import recorded_health
from regions.decisions.source import DjangoControlPlane, locate_ip
from regions.errors import DomainError, bad_input
from regions.fleet import snapshot
from regions.validation import Field, Invalid, integer, obj, parse_json, string, validate
from trafficmgr.requestpath import Outcome, Plan, RequestInfo, RequestPath, RequestPathConfig
from trafficmgr.routing.countries import continent_of
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.slowstart import serving_since
from trafficmgr.routing.types import ClientLocation, Fleet, Priority, RoutingTable

__all__ = ["NoCapacity", "current_table", "decide", "forget", "locate_ip", "retry_after_s"]

MAX_TOKENS = 1_000_000
LOADS_TTL_S = 0.5
MAX_BODY_BYTES = 64 * 1024
PREFIX_HASHES = ("list", integer(-(2**63), 2**64 - 1), 1024)

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


class _RouteSource(DjangoControlPlane):
    """The control plane, over the fleet view the caller routes with when it hands one."""

    def __init__(self) -> None:
        super().__init__()
        self.view: snapshot.FleetView | None = None

    def fleet(self) -> Fleet:
        if self.view is None:
            return super().fleet()
        return self.view.fleet  # kept fresh by the caller (the ASGI front, on its loop)


class _Router:
    """This process's core for ``/route``, read again when its inputs move."""

    def __init__(self) -> None:
        self.source = _RouteSource()
        config = RequestPathConfig(default_strategy="ai_aware", loads_ttl_s=LOADS_TTL_S)
        self.core = RequestPath(self.source, config)
        self._key: tuple[int, str | None] | None = None  # (fleet view, table version) read
        self._lock = threading.Lock()
        self._ramped: dict[str, float] = {}  # endpoint → the recorded return applied

    def fresh(self, view: snapshot.FleetView) -> RequestPath:
        """Return the core, its view read again when the fleet, the table or time moved."""
        key = (id(view), hotstate.get().table_version())
        if key == self._key and not self.core.stale():
            return self.core
        with self._lock:  # one reader; the others decide on the view as it is
            if key != self._key or self.core.stale():
                self.source.view = view
                self.core.maintain()
                self._ramp(self.core, time.time())
                self._key = key
        return self.core

    def _ramp(self, core: RequestPath, wall: float) -> None:
        """Start the slow start of endpoints the control loop saw come back lately."""
        snap = core.snapshot()
        slow_start_s = snap.fleet.failover.slow_start_s
        record = recorded_health()
        mono = time.monotonic()
        for view in snap.regions.values():
            for name in view.usable():
                doc = record.get(name)
                if not isinstance(doc, dict):
                    continue
                at = doc.get("since")
                since = serving_since(
                    bool(doc.get("healthy")),
                    float(at) if isinstance(at, int | float) else None,
                    True,
                    wall,
                )
                if since is None or wall - since >= slow_start_s:
                    continue
                if self._ramped.get(name, -math.inf) < since:
                    self._ramped[name] = since
                    core.ramping_since(name, mono - (wall - since))


_router: _Router | None = None
_router_lock = threading.Lock()


def _current() -> _Router:
    global _router
    with _router_lock:
        if _router is None:
            _router = _Router()
        return _router


def parse_request(body: bytes) -> RequestInfo:
    """Validate a route body; return the request as the core reads it."""
    if len(body) > MAX_BODY_BYTES:
        raise DomainError(
            f"route body larger than {MAX_BODY_BYTES} bytes", code="too_large", status_code=413
        )
    with bad_input():
        doc = validate(ROUTE_BODY, parse_json(body))
        ip, location = _client(doc)
    return RequestInfo(
        model=doc["model"],
        client_ip=ip,
        priority=doc["priority"],
        input_tokens=doc["input_tokens"],
        prefix_hashes=tuple(doc["prefix_hashes"]),
        max_output_tokens=doc["max_output_tokens"],
        location=location,
    )


def _client(doc: dict[str, Any]) -> tuple[str | None, ClientLocation | None]:
    ip, country = doc.get("client_ip"), doc.get("client_country")
    if ip is not None and country is not None:
        raise Invalid("client_country", "give client_ip or client_country, not both")
    if ip is not None:
        try:
            return str(ipaddress.ip_address(ip)), None
        except ValueError:
            raise Invalid("client_ip", f"{ip!r} is not an IPv4 or IPv6 address") from None
    if country is not None:
        if country != country.upper() or continent_of(country) is None:
            raise Invalid(
                "client_country", f"{country!r} is not an upper-case ISO 3166-1 alpha-2 code"
            )
        return None, country_location(country)
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
    """Route one request; raise DomainError (400, 403) or NoCapacity (503).

    ``view`` is the fleet to route over (default: ``snapshot.current()``, which may read the
    database; the ASGI front passes a view it keeps fresh itself). ``now`` is unused: the
    core keeps its own clock (kept for callers that pass it).
    """
    info = parse_request(body)
    view = snapshot.current() if view is None else view
    if info.model not in view.models:
        raise DomainError(
            f"model: unknown model {info.model!r}",
            code="invalid",
            fields={"model": [f"no endpoint serves {info.model!r}"]},
            status_code=400,
        )
    core = _current().fresh(view)
    result = core.decide(info)
    if not isinstance(result, Plan):
        if result.status == 403:  # a client the fleet denies because it cannot be located
            raise DomainError(result.message, code=result.code, status_code=403)
        metrics.count_decision("", "", result.code)
        raise NoCapacity(result.message, retry_after_s())
    core.finished(result.handle, None, Outcome.CANCELLED)  # nothing is tracked in flight
    return _decision(core, result)


def _decision(core: RequestPath, plan: Plan) -> Decision:
    target = plan.targets[0]
    outcome = "weighted" if "(weighted pick" in plan.reason.partition(";")[0] else "fallback"
    metrics.count_decision(target.region, target.name, outcome)
    return Decision(
        target.region,
        target.name,
        target.address,
        core.snapshot().table.version,
        plan.reason,
    )


def forget() -> None:
    """Drop this process's core and what it learned (tests, a process starting over)."""
    global _router
    with _router_lock:
        _router = None


def core() -> RequestPath:
    """Return this process's ``/route`` core (its learner, tests and benches)."""
    return _current().core
