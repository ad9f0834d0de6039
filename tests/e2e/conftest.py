"""One running cluster (tests/e2e/cluster.py) for every test of this directory.

The fleet is the drills' end-to-end fleet: ``eu-west`` (two endpoints) and ``eu-central``
(one, priority 2) hold the strict ``gdpr`` rule for EU clients, ``us-east`` (one endpoint)
serves the rest; heartbeats every second, three missed make an endpoint bad, a 4 s slow
start and a 2 s hold-down. Without PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) every
test here skips, which fails the run under ``TRAFFICMGR_REQUIRE_SERVICES=1``; with them the
cluster gets a database on that PostgreSQL and, where ``redis-server`` is installed, a Redis
server of its own (see ``Cluster.start_redis``). When a test fails, its report carries the
tail of every process's log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.stores import ServicesMissing, find_services

FLEET_YAML = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    priority: 1
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: A100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    priority: 2
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 4, hold_down_s: 2,
           all_down: fail_open}
clients:
  - {country: DE, share: 0.3}
  - {country: GB, share: 0.2}
  - {country: US, share: 0.5}
"""

_clusters: list[Cluster] = []


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The running cluster; every process it started is gone after the last test here."""
    try:
        services = find_services(dict(os.environ))
    except ServicesMissing as exc:
        pytest.skip(str(exc))
    running = Cluster(tmp_path_factory.mktemp("cluster"), FLEET_YAML, services)
    _clusters.append(running)
    left: list[str] = []
    try:
        running.start()
        print(f"\ncluster up: {running.timings} (s)")
        yield running
    finally:
        stopping = time.monotonic()
        left = running.stop()
        print(
            f"\ncluster stopped in {time.monotonic() - stopping:.1f} s"
            + (f"; SIGKILL needed for {running.killed}" if running.killed else "")
        )
    assert not left, f"processes still running after SIGKILL: {left}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and _clusters:
        report.sections.append(("cluster process logs (tails)", _clusters[-1].tails()))
