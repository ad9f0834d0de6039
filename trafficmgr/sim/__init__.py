"""Trace-driven discrete-event simulator of a fleet under the engine's routing policies.

``python -m trafficmgr.sim --fleet FILE --trace FILE --policies ... --json OUT`` (see
``cli.py``; ``run_cli(argv)`` for wrappers such as ``manage.py simulate``). The pieces:

- ``traces``: Azure CSV, Mooncake JSONL and BurstGPT CSV readers, detected by content.
- ``workload``: load scaling against the fleet's estimated capacity, client countries and
  resolvers, models, all from one seed.
- ``server``: one endpoint's continuous-batching service model (the engine's
  ``estimator.ServiceRates``): FCFS prefill at the rate decodes leave, shared decode
  capped per request, slot and KV-cache admission, an LRU prefix cache.
- ``control``: the global level through the engine itself: synthetic heartbeats,
  ``evaluate_fleet``, ``compile_table``, ``lookup`` behind TTL-caching resolvers,
  ``allowed_regions`` for the residency check.
- ``policies``: the engine's pickers, and the ``oracle`` that knows true output lengths.
- ``des``: the event loop; ``faults``: region and endpoint outages; ``metrics``: the output
  JSON's figures; ``run``: several policies over one workload; ``plot``: the PNG.

The simulator decides nothing itself: routing, health, failover and residency are the
engine's, called as the control plane calls them.

Imports: the engine (``trafficmgr.routing``, ``trafficmgr.contracts``, ``trafficmgr.fleetfile``)
only; no process, no Django.
"""
