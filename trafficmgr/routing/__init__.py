"""The engine: every routing decision, pure, over frozen values and ``now`` given as arguments.

Owns: the fleet's value types (``types``), health and failover state machines (``health``,
``failover``, ``endpoint_state``), the compiled routing table (``table``, ``table_json``,
``table_diff``), residency, the per-request region decision (``decision``), the endpoint
pickers (``picker``, ``pickbase``, ``ai_aware``, ``estimator``, ``prompt``, ``slowstart``) and
geography (``geo``, ``countries``, ``countrysets``).
Imports: itself and the standard library only (``tests/architecture/layers.py`` checks it): no
ORM, settings, clock, file or network, so the simulator, the DNS server, the request path and
the control plane all run the same rules.
"""
