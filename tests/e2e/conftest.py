"""One running cluster (``trafficmgr.testing.topology.cluster``) for every test of this directory.

The fleet is ``tests.worlds.CLUSTER``, the drills' end-to-end fleet: ``eu-west`` (two endpoints)
and ``eu-central`` (one, priority 2) hold the strict ``gdpr`` rule for EU clients, ``us-east``
(one endpoint) serves the rest; heartbeats every second, three missed make an endpoint bad,
a 4 s slow start and a 2 s hold-down. Without PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) every
test here skips, which fails the run under ``TRAFFICMGR_REQUIRE_SERVICES=1``; with them the
cluster gets a database on that PostgreSQL and, where ``redis-server`` is installed, a Redis
server of its own (see ``Cluster.start_redis``). When a test fails, its report carries the tail
of every process's log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.worlds import CLUSTER
from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.stores import ServicesMissing, find_services

_clusters: list[Cluster] = []


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The running cluster; every process it started is gone after the last test here."""
    try:
        services = find_services(dict(os.environ))
    except ServicesMissing as exc:
        pytest.skip(str(exc))
    running = Cluster(tmp_path_factory.mktemp("cluster"), CLUSTER, services)
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
