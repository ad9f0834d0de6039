"""A Redis that accepts and never answers: the table source gives up and retries.

A network partition sends no error: the TCP handshake succeeds (or the connection stays up)
and no byte comes back. Without read timeouts the source waited in its first command for as
long as redis-py let it (for ever before redis-py 6, 5 s since), blind to the partition
healing. Now each command gives up after ``READ_TIMEOUT_S`` and the source reconnects with
its backoff, serving the table it has meanwhile (fail static).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable

import pytest

from tests.blackhole import Blackhole
from tests.dns.test_redis_source import RedisProcess, publish, redis_server, wait_for
from tests.dns.world import everywhere, quiet_config
from trafficmgr.dns.metrics import Counters
from trafficmgr.dns.server import DnsServer, ServerThread
from trafficmgr.dns.sources import IDLE_CHECK_S, READ_TIMEOUT_S, RedisSource
from trafficmgr.dns.tables import TableStore
from trafficmgr.routing.types import Fleet

__all__ = ["redis_server"]  # the fixture, shared with test_redis_source.py


async def run_for(source: RedisSource, seconds: float) -> None:
    task = asyncio.create_task(source.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.slow
def test_a_silent_redis_costs_the_source_a_timeout_and_a_retry(fleet: Fleet) -> None:
    hole = Blackhole()
    counters = Counters()
    store = TableStore(fleet, counters, None, None)
    source = RedisSource(f"redis://127.0.0.1:{hole.port}/0", store, counters)
    try:
        # Two 2 s timeouts and a backoff fit in 7 s; at redis-py's 5 s default only one does.
        asyncio.run(run_for(source, 3 * READ_TIMEOUT_S + 1.0))
    finally:
        hole.close()
    assert hole.accepted, "the source never connected"
    assert counters.events["redis_errors"] >= 2, counters.events["redis_errors"]
    assert len(hole.accepted) >= 2, "the source did not reconnect"
    assert not source.connected
    assert store.snapshot.source == "static"  # still serving: the fleet's static table


class FreezingProxy:
    """A TCP proxy to a real Redis that can freeze: bytes stop flowing both ways, every
    connection stays open, new ones are accepted and left unanswered (a partition)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(client)
            if self.frozen.is_set():
                continue  # accepted, never answered
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.held.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            while self.frozen.is_set():  # hold the bytes back, keep the connection
                time.sleep(0.05)
            try:
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.frozen.clear()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.integration
def test_a_partition_after_subscribing_is_noticed_and_the_table_followed_after(
    redis_server: RedisProcess | None, make_server: Callable[..., DnsServer]
) -> None:
    if redis_server is None:
        pytest.skip("needs a redis-server of its own behind the proxy")
    proxy = FreezingProxy(redis_server.port)
    server = make_server(quiet_config(redis_url=f"redis://127.0.0.1:{proxy.port}/0"))
    thread = ServerThread(server)
    thread.start()
    try:
        wait_for(lambda: server.redis is not None and server.redis.connected, "not subscribed")
        publish(redis_server.url, everywhere([("eu-central", 1.0)], version="before"))
        wait_for(lambda: server.store.snapshot.version == "before", "update not received")
        proxy.frozen.set()  # the partition: nothing flows, nothing closes
        publish(redis_server.url, everywhere([("us-west", 1.0)], version="during"))
        wait_for(
            lambda: server.metrics["redis_errors"] >= 1,
            "the partition was not noticed",
            IDLE_CHECK_S + 2 * READ_TIMEOUT_S + 3.0,
        )
        assert server.store.snapshot.version == "before"  # fail static meanwhile
        proxy.frozen.clear()  # healed; the update's message was lost with the partition
        wait_for(lambda: server.store.snapshot.version == "during", "table not followed", 15.0)
    finally:
        thread.stop()
        proxy.close()
