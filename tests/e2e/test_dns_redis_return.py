"""The DNS server's Redis source follows the table again within 3 s of Redis returning.

Before: its reconnect backoff doubled up to 30 s, so after a 17 s outage the next attempt
came ~14 s (after a 20 s one ~11 s) after Redis was back, and the server answered from a
stale table meanwhile. Now the backoff is capped at ``BACKOFF_MAX_S`` (2 s, jittered), and
the reconnect reads the table key at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trafficmgr.dns.sources import BACKOFF_MAX_S, REDIS_KEY, RedisSource
from trafficmgr.routing.table import table_to_json
from trafficmgr.routing.types import RegionState, RegionStatus, RoutingTable, WeightedRegion
from trafficmgr.testing.ports import free_port
from trafficmgr.testing.topology.processes import wait_until

pytestmark = pytest.mark.integration
OUTAGE_S = 17.0


class Tables:
    """The part of the DNS server's table store the source uses."""

    def __init__(self) -> None:
        self.versions: list[tuple[float, str]] = []

    def set(self, table: Any, source: str) -> None:
        self.versions.append((time.time(), table.version))


class Counts:
    def add(self, name: str) -> None:
        return None


def table(version: str) -> RoutingTable:
    status = RegionStatus(RegionState.HEALTHY, 0.5, 100.0, "ok", 0.0)
    entries = (WeightedRegion("eu-west", 1.0, "ok"),)
    return RoutingTable(version, 1.8e9, {"eu-west": status}, {"default": {"m": entries}})


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    servers: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        servers.append(
            subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
            )
        )

    start()
    yield port, servers
    for s in servers:
        if s.poll() is None:
            s.send_signal(signal.SIGKILL)
            s.wait(5)


def test_the_table_is_read_again_within_3_s_of_redis_returning(
    redis_port: tuple[int, list[subprocess.Popen[bytes]]],
) -> None:
    import redis

    port, servers = redis_port
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    wait_until(client.ping, 10, "redis-server")
    client.set(REDIS_KEY, json.dumps(table_to_json(table("before"))))
    tables = Tables()
    source = RedisSource(url, tables, Counts())  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    task = loop.create_task(source.run())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        wait_until(lambda: tables.versions, 10, "the first table")
        servers[0].send_signal(signal.SIGKILL)
        servers[0].wait(5)
        time.sleep(OUTAGE_S)
        servers.append(
            subprocess.Popen(servers[0].args, stdout=subprocess.DEVNULL)  # type: ignore[arg-type]
        )
        wait_until(client.ping, 10, "redis-server to restart")
        back = time.time()
        client.set(REDIS_KEY, json.dumps(table_to_json(table("after"))))  # no announcement
        wait_until(
            lambda: any(v == "after" for _, v in tables.versions), 10, "the table after the return"
        )
        late = next(t for t, v in tables.versions if v == "after") - back
        print(f"\nDNS source on the table {late:.2f} s after Redis returned")
        assert late <= 3.0
        assert BACKOFF_MAX_S <= 3.0
    finally:

        async def end() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run_coroutine_threadsafe(end(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
        client.close()
