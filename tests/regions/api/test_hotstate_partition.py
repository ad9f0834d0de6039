"""A partitioned hot state costs a request about a second, and the API is back soon after.

A network partition looks like this: Redis's port still accepts TCP, and nothing answers. The
API is served as deployed (``uvicorn trafficmgr.asgi:application`` in a child process) with its
``REDIS_URL`` pointing at a relay on 127.0.0.1 in front of its own ``redis-server``: the relay
forwards until the test cuts it, then holds every connection (old and new) open and silent,
like a dropped link. During the cut a heartbeat, a decision and an authenticated read answer
within ``FAST_S`` — the JSON 503 with ``Retry-After``, or 200 where the path serves from what
it holds — instead of the 15 to 25 s redis-py's defaults cost; once the link is back they work
again within ``BACK_S`` (``regions.hotstate.redis_client``: short timeouts and a breaker).
"""

from __future__ import annotations

import contextlib
import json
import selectors
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.regions.api.live_server import (
    AppServer,
    RedisProcess,
    Reply,
    prepare_database,
    server_env,
)
from tests.regions.api.test_outage_errors import DECISION, JSON, assert_contract, bearer
from tests.regions.loop.conftest import hb_doc

pytestmark = pytest.mark.integration

# A request touches the Redis cache (the rate limit, 1 s) and the hot state (1 s, then its
# breaker answers at once); redis-py's defaults made it 15 to 25 s.
FAST_S = 2.5
BACK_S = 5.0  # the breaker's 2 s spell, a probe, and slack for a loaded machine


class Relay:
    """A TCP relay on 127.0.0.1 to ``upstream`` that a test can cut (``cut``) and mend
    (``mend``): while cut, every connection stays open and nothing passes either way."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.cut_off = threading.Event()
        self._held: list[socket.socket] = []  # connections that saw the cut: closed at mend
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def cut(self) -> None:
        self.cut_off.set()

    def mend(self) -> None:
        """Pass traffic again; connections from before (their clients gave up) are closed."""
        with self._lock:
            held, self._held = self._held, []
            self.cut_off.clear()
        for conn in held:
            with contextlib.suppress(OSError):
                conn.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.mend()

    def _hold(self, *conns: socket.socket) -> None:
        with self._lock:
            self._held.extend(conns)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.cut_off.is_set():
                self._hold(client)  # accepted, never answered
                continue
            threading.Thread(target=self._pass, args=(client,), daemon=True).start()

    def _pass(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
        except OSError:
            client.close()
            return
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as sel:
            for conn in peers:
                sel.register(conn, selectors.EVENT_READ)
            while not self._closed.is_set():
                if self.cut_off.is_set():
                    self._hold(client, server)  # silent both ways until mended
                    return
                for key, _ in sel.select(0.05):
                    if self.cut_off.is_set():
                        break
                    conn: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = conn.recv(65536)
                        if data:
                            peers[conn].sendall(data)
                    except OSError:
                        data = b""
                    if not data:
                        client.close()
                        server.close()
                        return


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisProcess]:
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server binary to partition (apt-get install redis-server)")
    redis = RedisProcess(tmp_path)
    redis.start()
    yield redis
    redis.kill()


@pytest.fixture
def relay(redis_server: RedisProcess) -> Iterator[Relay]:
    link = Relay(redis_server.port)
    yield link
    link.close()


def timed_probes(
    server: AppServer, secrets: dict[str, str], seq: int
) -> dict[str, tuple[Reply, float]]:
    """A heartbeat, a decision and an authenticated read, each with how long it took."""
    beat = json.dumps(hb_doc("euw-1", seq, time.time())).encode()
    probes = {
        "heartbeat": ("POST", "/api/v1/heartbeats/", beat, secrets["agent"]),
        "decision": ("POST", "/api/v1/route", DECISION, secrets["viewer"]),
        "regions": ("GET", "/api/v1/regions/", b"", secrets["viewer"]),
    }
    out = {}
    for name, (method, path, body, secret) in probes.items():
        start = time.monotonic()
        reply = server.request(method, path, body, {**JSON, **bearer(secret)})
        out[name] = (reply, time.monotonic() - start)
    return out


def test_a_partitioned_hot_state_answers_fast_and_recovers(tmp_path: Path, relay: Relay) -> None:
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite3'}", relay.url)
    secrets = prepare_database(env)
    server = AppServer(env, tmp_path / "uvicorn.log")
    server.start()
    try:
        before = timed_probes(server, secrets, 1)
        assert before["heartbeat"][0].status < 300, before["heartbeat"]
        assert before["regions"][0].status == 200, before["regions"]
        decided = before["decision"][0].status

        relay.cut()
        for seq in (2, 3):  # the first meets the timeouts, the second the open breaker
            for name, (reply, took) in timed_probes(server, secrets, seq).items():
                assert_contract(name, reply)
                assert took < FAST_S, f"{name} took {took:.1f} s during the partition"
                if name != "regions":  # the fleet view is the database's; the rest is Redis's
                    assert reply.status == 503, (name, reply.status, reply.body)
                    assert "Redis" in reply.json()["detail"], reply.body

        relay.mend()
        deadline = time.monotonic() + BACK_S
        seq = 4
        while True:
            after = timed_probes(server, secrets, seq)
            ok = after["heartbeat"][0].status < 300 and after["decision"][0].status == decided
            if ok or time.monotonic() > deadline:
                break
            seq += 1
            time.sleep(0.2)
        assert ok, {name: (r.status, r.body[:200]) for name, (r, _) in after.items()}
        assert after["regions"][0].status == 200
    finally:
        server.stop()
