"""The request path's decision core, shared by the OpenAI gateway and the Envoy endpoint picker.

Framework-free (no aiohttp, no gRPC, no Django): a front reads a request, asks the core, and
reports back; the control plane comes in through an injected ``ControlPlane`` source.

Build one per process::

    source = StaticSource.from_file("fleet.yaml", {"secret": ClientIdentity("bench")})
    core = RequestPath(source, RequestPathConfig(region=None))
    core.maintain()                     # then every config.loads_ttl_s, off the request path

Per request::

    hit, who = core.cached_identity(token)  # not hit: core.authenticate(token) (may block)
    result = core.decide(info)          # or ``await core.admit(info)``: waits while saturated
    if isinstance(result, Refusal): answer result.status, result.code, result.message,
                                        # Retry-After: result.retry_after_s
    for target in result.targets:       # the pick first, then fallbacks (same residency)
        core.served(result.handle, target.name)      # an attempt goes to this endpoint
        ... on failure before the first byte:
        core.attempt_failed(result.handle, Outcome.CONNECT_ERROR)   # then try the next
    core.progress(result.handle, tokens)             # as output tokens stream back
    core.finished(result.handle, Usage(...) or None, Outcome.OK)    # exactly once; idempotent

``RequestInfo`` carries the raw ``x-trafficmgr-priority`` and ``x-trafficmgr-strategy``
values (the core refuses bad ones with 400 naming the header), the session id
(``x-session-id``, else the OpenAI ``user``), the prompt text (tokens and prefix blocks are
derived with ``trafficmgr.routing.prompt``) or precomputed ``input_tokens`` /
``prefix_hashes``, and an optional ``subset`` (endpoint names or ``host:port``). A ``Plan``
carries ``targets`` (``Target``: name, address, region), the model to request (a fallback
chain may change it), the region, the reason, and ``routing_s`` / ``queued_s``. Refusals:
400 (bad header or value), 404 ``model_not_found``, 429 ``saturated`` and 503
``no_allowed_region`` / ``no_capacity`` (both with ``retry_after_s``).

Operations: ``drain(name)`` / ``undrain(name)``, ``in_flight()``, ``models()``, and the
counters ``rejects``, ``outlier.ejections_total``, ``queue.depth()``.

How it decides: ``placement`` (regions, affinity, picker, fallbacks), ``regionview``
(candidates: heartbeats plus in-flight; admission limits; slow start), ``outlier`` (ejection
and half-open probes), ``admission`` (bounded priority queues), ``learning`` (estimator and
latency tail; completions reported to the control plane), ``source`` (the ``ControlPlane``
protocol and ``StaticSource``).

Imports: the engine (``trafficmgr.routing``, ``contracts``, ``fleetfile``, ``geoip``) only;
never a process (the fronts import it) nor the simulator nor Django.
"""

from __future__ import annotations

from trafficmgr.requestpath.config import RequestPathConfig
from trafficmgr.requestpath.core import RequestPath
from trafficmgr.requestpath.parse import PRIORITY_HEADER, STRATEGY_HEADER, bearer_token
from trafficmgr.requestpath.source import ControlPlane, StaticSource
from trafficmgr.requestpath.types import (
    ClientIdentity,
    Outcome,
    Plan,
    Refusal,
    RequestInfo,
    Target,
    Usage,
)

__all__ = [
    "PRIORITY_HEADER",
    "STRATEGY_HEADER",
    "ClientIdentity",
    "ControlPlane",
    "Outcome",
    "Plan",
    "Refusal",
    "RequestInfo",
    "RequestPath",
    "RequestPathConfig",
    "StaticSource",
    "Target",
    "Usage",
    "bearer_token",
]
