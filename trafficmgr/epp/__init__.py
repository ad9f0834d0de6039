"""The Envoy endpoint picker (EPP): ext_proc v3 speaking the Gateway API Inference
Extension's endpoint picker protocol, in front of the shared request-path core.

``server`` runs the gRPC services, ``exchange`` answers one request's ext_proc stream,
``request``/``usage``/``wire`` read and write the protocol's messages, ``decision`` names
what the EPP needs from the core, and ``envoy_config`` writes the Envoy bootstrap that
goes with it. See docs/epp.md.

Imports: the request-path core (``trafficmgr.requestpath``), the engine and the fleet file;
never another process (gateway, DNS, simulated server, agent) nor Django.
"""
