"""The OpenAI-compatible gateway: the request path as an HTTP proxy in front of the endpoints.

Clients point an OpenAI library at ``http://HOST:PORT/v1`` with a client token. Each request
is routed by the shared decision core (``trafficmgr.requestpath``: residency, region, endpoint,
affinity, admission, ejection) and proxied to the endpoint it picked over pooled keep-alive
connections (``upstream``), streaming answers passed through as they arrive (``proxy``,
``sse``), served by a lean HTTP/1.1 server (``http``), and,
when asked, traced with OpenTelemetry (``tracing``: off by default, its SDK then never
imported). The gateway never imports the Django app: the control plane comes in as a
``ControlPlane`` source.

Entry points: ``serve(source, listen, region, workers)`` (what ``manage.py gateway`` calls,
with the Django-backed source), ``start_gateway(core, settings)`` on a running loop (tests),
and ``python -m trafficmgr.gateway --fleet FILE --listen HOST:PORT --token SECRET``
(standalone, for benchmarks). docs/gateway.md has the details.

Imports: the request-path core (``trafficmgr.requestpath``), the runtime, the engine and the
fleet file; never another process (DNS, endpoint picker, simulated server, agent) nor Django.
"""

from __future__ import annotations

from trafficmgr.gateway.app import GatewayApp
from trafficmgr.gateway.server import RunningGateway, parse_listen, serve, start_gateway
from trafficmgr.gateway.settings import GatewaySettings, networks

__all__ = [
    "GatewayApp",
    "GatewaySettings",
    "RunningGateway",
    "networks",
    "parse_listen",
    "serve",
    "start_gateway",
]
