"""Deployments of the project started as local processes on loopback, for tests and benches.

- ``cluster``: docker-compose.yml's topology (uvicorn, celery worker and beat, the DNS server,
  one simulated agent per endpoint) on a PostgreSQL database and a Redis of its own;
- ``liveserver``: one ``manage.py demo`` server on a fresh SQLite database, with users of each
  role and a heartbeat feeder, or the cluster on the demo fleet;
- ``stores``, ``privatepg``: the PostgreSQL and Redis those use (a private PostgreSQL server
  to stop and start at will);
- ``observe``, ``faults``, ``consistency``: watching a running deployment from outside
  (tables, DNS, the API) and counting what a fault cost.

Every process is started through ``manage.py``, the console scripts or ``uvicorn`` and
``celery`` in a subprocess: nothing here imports the Django app (docs/architecture.md §3).
They run from a checkout (``ROOT``: manage.py, docker-compose.yml, examples/).

Imports: the engine, the contract and the runtime; the processes only by their command lines.
Only the benchmarks and the test suite import it; the product never does.
"""
