"""What the test suite and the benchmarks share: ports, launchers, fleets and named worlds.

- ``ports``: loopback ports free for the socket kinds a server binds (TCP, UDP, IPv6);
- ``topology``: the project's deployments as local processes on loopback (docker-compose.yml's
  cluster, the demo server with its users), their stores, and watching one from outside;
- ``demo``: the one launcher of ``manage.py demo`` (its command line and output);
- ``fleets``: a small builder of fleet files (sites, GPU profiles, regions, endpoints);
- ``worlds``: the named fleets the tests run on, built with it, each spelled once.

Imports: the engine, the contract and the runtime; the processes only by their command lines.
Only the benchmarks and the test suite import it; the product never does, and the runtime
image leaves it out (.dockerignore, pyproject.toml's package list).
"""
