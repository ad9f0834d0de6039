"""The Redis table source against a real Redis: updates arrive, an outage changes nothing.

Killing Redis while a client keeps querying over UDP costs no answer: tables come from
Redis, answers never wait for it.

Runs its own ``redis-server`` on a free loopback port when the binary is installed (so it
can stop and restart it), else uses ``REDIS_URL`` for the update part only; skipped when
neither is there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.exception
import dns.query
import pytest

from tests.dns.world import GB, NAME, addresses, ask, everywhere, query, quiet_config
from trafficmgr.dns.server import DnsServer, ServerThread
from trafficmgr.dns.sources import REDIS_CHANNEL, REDIS_KEY
from trafficmgr.routing.table import table_to_json
from trafficmgr.routing.types import RoutingTable
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration


class RedisProcess:
    """A throw-away redis-server on 127.0.0.1."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.workdir)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._accepts, "redis-server did not start")

    def _accepts(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


def wait_for(condition: Callable[[], bool], message: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.02)


def publish(url: str, table: RoutingTable, announce: bool = True) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        doc = json.dumps(table_to_json(table))
        client.set(REDIS_KEY, doc)
        if announce:
            client.publish(REDIS_CHANNEL, table.version)
    finally:
        client.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisProcess | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        if not os.environ.get("REDIS_URL"):
            pytest.skip("no redis-server binary and no REDIS_URL")
        yield None
        return
    redis_process = RedisProcess(binary, tmp_path)
    redis_process.start()
    yield redis_process
    redis_process.stop()


def test_tables_published_in_redis_are_served_and_survive_an_outage(
    redis_server: RedisProcess | None, make_server: Callable[..., DnsServer]
) -> None:
    url = redis_server.url if redis_server else os.environ["REDIS_URL"]
    server = make_server(quiet_config(redis_url=url))
    thread = ServerThread(server)
    thread.start()
    try:
        wait_for(lambda: server.redis is not None and server.redis.connected, "not subscribed")
        publish(url, everywhere([("eu-central", 1.0)], version="redis-1"))
        wait_for(lambda: server.store.snapshot.version == "redis-1", "update not received")
        assert server.store.snapshot.source == "redis"
        assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.20"}
        if redis_server is None:
            return
        redis_server.stop()  # Redis goes away: answers go on from the last good table
        wait_for(lambda: server.metrics["redis_errors"] >= 1, "outage not noticed")
        assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.20"}
        redis_server.start()  # back, empty; the control plane writes the table again
        publish(url, everywhere([("us-west", 1.0)], version="redis-2"), announce=False)
        wait_for(lambda: server.store.snapshot.version == "redis-2", "no reconnect", 20.0)
        assert addresses(ask(server, query(NAME, "A"))) == {"198.51.100.20"}
    finally:
        thread.stop()


def test_killing_redis_while_querying_loses_no_answer(
    tmp_path: Path, make_server: Callable[..., DnsServer]
) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary to kill (apt-get install redis-server)")
    redis_process = RedisProcess(binary, tmp_path)  # our own, never the shared one
    redis_process.start()
    server = make_server(quiet_config(redis_url=redis_process.url))
    thread = ServerThread(server)
    host, port = thread.start()
    asked: list[set[str] | None] = []
    stop = threading.Event()

    def keep_asking() -> None:
        wire = query(NAME, "A", ecs=(GB, 32))
        while not stop.is_set():
            try:
                reply = dns.query.udp(wire, host, port=port, timeout=2.0)
            except dns.exception.Timeout:
                asked.append(None)
                continue
            asked.append(addresses(reply))
            time.sleep(0.002)

    querier = threading.Thread(target=keep_asking, daemon=True)
    try:
        wait_for(lambda: server.redis is not None and server.redis.connected, "not subscribed")
        publish(redis_process.url, everywhere([("eu-central", 1.0)], version="before-kill"))
        wait_for(lambda: server.store.snapshot.version == "before-kill", "table not received")
        querier.start()
        wait_for(lambda: len(asked) >= 50, "no answers")
        assert redis_process.process is not None
        redis_process.process.kill()  # SIGKILL: no goodbye to the subscriber
        redis_process.process.wait(10)
        redis_process.process = None
        wait_for(lambda: server.metrics["redis_errors"] >= 1, "outage not noticed")
        during = len(asked)
        wait_for(lambda: len(asked) >= during + 100, "no answers while Redis is down")
        redis_process.start()
        publish(redis_process.url, everywhere([("eu-west", 1.0)], version="after-kill"))
        wait_for(lambda: server.store.snapshot.version == "after-kill", "no reconnect", 20.0)
        after = len(asked)
        wait_for(lambda: len(asked) >= after + 50, "no answers after the restart")
    finally:
        stop.set()
        if querier.is_alive():
            querier.join(10)
        thread.stop()
        redis_process.stop()
    assert None not in asked, f"{asked.count(None)} of {len(asked)} queries got no answer"
    assert all(a in ({"192.0.2.20"}, {"192.0.2.10"}) for a in asked)
    assert asked[-1] == {"192.0.2.10"} and asked[0] == {"192.0.2.20"}


def test_another_deployments_table_on_the_shared_channel_is_not_served(
    redis_server: RedisProcess | None, make_server: Callable[..., DnsServer]
) -> None:
    """Pub/sub ignores database indexes: a table published from db 1 must not reach db 0's."""
    import redis

    url = redis_server.url if redis_server else os.environ["REDIS_URL"]
    server = make_server(quiet_config(redis_url=url))
    thread = ServerThread(server)
    thread.start()
    try:
        wait_for(lambda: server.redis is not None and server.redis.connected, "not subscribed")
        publish(url, everywhere([("eu-central", 1.0)], version="ours"))
        wait_for(lambda: server.store.snapshot.version == "ours", "update not received")
        other = redis.Redis.from_url(url.rsplit("/", 1)[0] + "/1")
        try:
            theirs = json.dumps(table_to_json(everywhere([("us-west", 1.0)], version="theirs")))
            other.set(REDIS_KEY, theirs)
            other.publish(REDIS_CHANNEL, theirs)
            time.sleep(0.5)  # the cue has been taken: our own key was read back
            assert server.store.snapshot.version == "ours"
            assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.20"}
            other.delete(REDIS_KEY)
        finally:
            other.close()
        publish(url, everywhere([("eu-west", 1.0)], version="ours-2"))
        wait_for(lambda: server.store.snapshot.version == "ours-2", "own update not received")
        assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.10"}
    finally:
        thread.stop()
