"""Simulated OpenAI-compatible inference server: the backend of tests, demos and benchmarks.

It behaves like vLLM on the wire (``/v1/chat/completions``, ``/v1/completions`` with SSE
streaming, ``/v1/models``, ``/health``, vLLM-named ``/metrics``) and like the simulator on the
GPU: each endpoint is ``trafficmgr.sim.server.EndpointServer`` stepped in real time
(``engine``), so what the gateway measures against it is what ``trafficmgr.sim`` predicts.
Tokens follow the shared rule of ``trafficmgr.routing.prompt`` (one per word). Faults are
injected per endpoint (``faults``). See docs/simserver.md.

Modules: ``cli`` (command line), ``layout`` (which endpoint listens where), ``servers``
(sockets and lifecycle: ``SimServers``, ``SimServerThread``), ``handlers`` (HTTP), ``protocol``
(request bodies), ``responses`` (answers and SSE), ``output`` (answer lengths and words),
``engine`` (the model in real time), ``metrics`` (the vLLM page), ``faults``.

Imports: the engine (``trafficmgr.routing``, ``trafficmgr.fleetfile``) and the simulator's
model (``trafficmgr.sim``); no other process and no Django.
"""

from __future__ import annotations

from trafficmgr.simserver.faults import Fault, FaultKind
from trafficmgr.simserver.handlers import ServeOptions
from trafficmgr.simserver.layout import EndpointSpec, fleet_specs, single_spec
from trafficmgr.simserver.servers import SimServers, SimServerThread

__all__ = [
    "EndpointSpec",
    "Fault",
    "FaultKind",
    "ServeOptions",
    "SimServerThread",
    "SimServers",
    "fleet_specs",
    "single_spec",
]
