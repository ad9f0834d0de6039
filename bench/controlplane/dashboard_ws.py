"""Dashboard push latency to 50 concurrent WebSocket clients, and the page's first render.

Run: .venv/bin/python -m bench.controlplane.dashboard_ws [--clients 50] [--rounds 20] [--seconds 10]
                                            [--in-process-only | --deployed]

1. In process, through the real ASGI app (channels' WebsocketCommunicator, in-memory layer):
   time from ``group_send`` of a ``table.update`` to each client's receipt of it.
2. Against a real daphne server (``trafficmgr.testing.topology.liveserver``: temp SQLite, the demo
   fleet, an in-process control loop, heartbeats posted for every endpoint): ``--clients`` real
   sockets signed in as a viewer; for each ``table.update`` the loop publishes, time from the
   table's ``generated_at`` (the tick's start: an upper bound that includes the tick's own
   work) to each client's receipt; also the snapshot time on connect.
3. First render of the page in headless Chromium (when playwright and chromium exist): from
   navigation start to every region drawn on the map with the first snapshot.

``--deployed`` replaces all three with the deployed configuration: docker-compose.yml's services as
local processes (``trafficmgr.testing.topology.cluster``, as the e2e tests start them): PostgreSQL
(``--database-url``, default DATABASE_URL, else postgres://postgres@127.0.0.1:5432/trafficmgr_dev;
the run uses a database of its own on that server, dropped at the end), a private redis-server,
``migrate``, ``apply_fleet`` of the demo fleet, the web service's own command (uvicorn, 2 workers),
celery worker and beat (the control loop ticks in the worker), the DNS server and compose's
``simulate_agents``. ``--clients`` viewers' sockets are spread over both uvicorn workers (each
socket's worker read from /proc); for each of ``--rounds`` ``table.update`` messages the loop
publishes, time from the table's ``generated_at`` to each client's receipt, per worker too (waiting
at most ``--seconds`` or 5 s per update, whichever is longer; the demo fleet's table changes on
nearly every 1 s tick); the snapshot time on connect; then the page's first render as in 3. Every
process started runs in a group of its own, and every group is stopped at the end, on Ctrl-C,
SIGTERM or an error alike.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import http.cookiejar
import json
import os
import re
import signal
import statistics
import struct
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench.suite import ROOT

DEPLOYED_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/trafficmgr_dev"


def summary(name: str, samples_ms: list[float]) -> str:
    if not samples_ms:
        return f"{name:<46} no samples"
    xs = sorted(samples_ms)
    p95, p99 = (xs[min(len(xs) - 1, int(q * len(xs)))] for q in (0.95, 0.99))
    return (
        f"{name:<46} n={len(xs):<5} p50={statistics.median(xs):8.2f} ms  "
        f"p95={p95:8.2f} ms  p99={p99:8.2f} ms  max={xs[-1]:8.2f} ms"
    )


# --- 1. in process ------------------------------------------------------------------------


def setup_django(tmp: Path) -> None:
    os.environ.pop("REDIS_URL", None)
    os.environ.update(
        {
            "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
            "TRAFFICMGR_VAR_DIR": str(tmp),
            "SECRET_KEY": "bench-only-secret-key",
            "TRAFFICMGR_TLS": "0",
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "trafficmgr.settings",
        }
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    with open(os.devnull, "w") as quiet:
        call_command("apply_fleet", str(ROOT / "examples" / "fleet.yaml"), stdout=quiet)


def viewer_cookie() -> bytes:
    from django.contrib.auth.models import Group, User
    from django.test import Client

    user = User.objects.create_user("bench-viewer", password="bench-password-123")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def in_process(clients: int, rounds: int, cookie: bytes) -> dict[str, list[float]]:
    from channels.db import database_sync_to_async
    from channels.layers import get_channel_layer
    from channels.testing import WebsocketCommunicator

    from dashboard.messages import table_doc
    from trafficmgr.asgi import application

    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]
    comms, connect_ms = [], []
    for _ in range(clients):
        comm = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
        started = time.perf_counter()
        ok, _ = await comm.connect(timeout=10)
        assert ok
        snapshot = await comm.receive_json_from(timeout=10)
        assert snapshot["type"] == "snapshot"
        connect_ms.append((time.perf_counter() - started) * 1000)
        comms.append(comm)
    table = await database_sync_to_async(table_doc)()
    layer = get_channel_layer()
    latencies: list[float] = []

    async def receive(comm: Any) -> float:
        while True:
            message = await comm.receive_output(timeout=10)
            if '"table.update"' in message.get("text", "")[:40]:
                return time.perf_counter()

    for i in range(rounds):
        message = {
            "type": "table.update",
            "version": f"bench{i}",
            "table": table,
            "diff": {"summary": "bench"},
            "transitions": [],
        }
        waiters = [asyncio.ensure_future(receive(c)) for c in comms]
        await asyncio.sleep(0)
        sent = time.perf_counter()
        await layer.group_send("dashboard", message)
        for at in await asyncio.gather(*waiters):
            latencies.append((at - sent) * 1000)
    for comm in comms:
        await comm.disconnect()
    return {"connect+snapshot": connect_ms, "publish→receipt": latencies}


# --- 2. real server, raw WebSocket clients ------------------------------------------------


def login_cookie(url: str, username: str, password: str) -> str:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{url}/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    form = urllib.parse.urlencode(
        {
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": token.group(1),
            "next": "/",
        }
    )
    opener.open(
        urllib.request.Request(
            f"{url}/login/", data=form.encode(), headers={"Referer": f"{url}/login/"}
        )
    )
    session = next((c.value for c in jar if c.name == "sessionid"), None)
    assert session, "login failed"
    return f"sessionid={session}"


class RawSocket:
    """The least WebSocket client that reads a server's text frames (RFC 6455)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int, path: str, cookie: str) -> RawSocket:
        reader, writer = await asyncio.open_connection(host, port, limit=2**24)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\nOrigin: http://{host}:{port}\r\n"
                f"Cookie: {cookie}\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(head.decode(errors="replace"))
        return cls(reader, writer)

    async def message(self) -> str:
        parts = []
        while True:
            b0, b1 = await self.reader.readexactly(2)
            size = b1 & 0x7F
            if size == 126:
                size = struct.unpack(">H", await self.reader.readexactly(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", await self.reader.readexactly(8))[0]
            mask = await self.reader.readexactly(4) if b1 & 0x80 else None
            data = await self.reader.readexactly(size)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("closed by the server")
            if opcode == 0x9:  # unanswered pings make uvicorn close the socket after ~40 s
                self.send_control(0xA, data)
                continue
            if opcode == 0xA:
                continue
            parts.append(data)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def send_control(self, opcode: int, payload: bytes = b"") -> None:
        """Send a control frame, masked as a client's must be (payloads are ≤ 125 bytes)."""
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def close(self) -> None:
        """Send a close frame and hang up."""
        if not self.writer.is_closing():
            self.send_control(0x8)
        self.writer.close()

    @property
    def port(self) -> int:
        """The client end's port."""
        return int(self.writer.get_extra_info("sockname")[1])


async def real_server(
    url: str, clients: int, seconds: float, cookie: str
) -> dict[str, list[float]]:
    host, port = url.removeprefix("http://").split(":")
    connect_ms: list[float] = []
    latencies: list[float] = []
    sockets = []
    for _ in range(clients):
        started = time.perf_counter()
        sock = await RawSocket.open(host, int(port), "/ws/dashboard/", cookie)
        first = json.loads(await sock.message())
        assert first["type"] == "snapshot"
        connect_ms.append((time.perf_counter() - started) * 1000)
        sockets.append(sock)

    receipts: dict[str, list[float]] = {}

    async def listen(sock: RawSocket) -> None:
        while True:
            text = await sock.message()
            at = time.time()
            if text.startswith('{"type": "table.update"'):
                doc = json.loads(text)
                latencies.append((at - iso_seconds(doc["table"]["generated_at"])) * 1000)
                receipts.setdefault(doc["version"], []).append(at)

    tasks = [asyncio.ensure_future(listen(s)) for s in sockets]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    for sock in sockets:
        sock.close()
    spread = [(max(ts) - min(ts)) * 1000 for ts in receipts.values() if len(ts) == len(sockets)]
    return {
        "connect+snapshot": connect_ms,
        "tick start→receipt (table.update)": latencies,
        "fan-out spread (last − first client)": spread,
    }


def iso_seconds(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- the deployed topology ----------------------------------------------------------------


class Viewers:
    """Dashboard sockets on the web workers; each socket read from the moment it opens (so
    nothing waits in its buffer), its ``table.update`` receipts kept once measuring starts."""

    def __init__(self, url: str, cookie: str, workers: list[int]) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port, self.cookie, self.workers = host, int(port), cookie, workers
        self.open: dict[RawSocket, tuple[int, asyncio.Task[None]]] = {}  # → worker, reader
        self.connect_ms: list[float] = []
        self.since: float | None = None  # measuring tables generated from then on
        # (version, generated_at) → (worker, ms): a version recurs when weights move back
        self.receipts: dict[tuple[str, str], list[tuple[int, float]]] = {}
        self.changed = asyncio.Event()
        self.lost: list[str] = []  # sockets that ended while open

    async def add(self) -> int:
        """Open one dashboard; return the worker serving it."""
        from trafficmgr.testing.topology.observe import socket_owners

        started = time.perf_counter()
        sock = await RawSocket.open(self.host, self.port, "/ws/dashboard/", self.cookie)
        first = json.loads(await sock.message())
        assert first["type"] == "snapshot", first["type"]
        self.connect_ms.append((time.perf_counter() - started) * 1000)
        worker = socket_owners(self.workers, self.port).get(sock.port, 0)
        self.open[sock] = (worker, asyncio.ensure_future(self.listen(sock, worker)))
        return worker

    def drop(self, worker: int) -> None:
        sock = next(s for s, (w, _) in self.open.items() if w == worker)
        self.open.pop(sock)[1].cancel()
        sock.close()

    def per_worker(self) -> Counter[int]:
        return Counter(w for w, _ in self.open.values())

    async def listen(self, sock: RawSocket, worker: int) -> None:
        try:
            await self.read(sock, worker)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            self.lost.append(f"{sock.port} on {worker}: {exc!r}")

    async def read(self, sock: RawSocket, worker: int) -> None:
        while True:
            text = await sock.message()
            at = time.time()
            if self.since is None or not text.startswith('{"type": "table.update"'):
                continue
            doc = json.loads(text)
            generated = iso_seconds(doc["table"]["generated_at"])
            if generated >= self.since:
                ms = (at - generated) * 1000
                key = (doc["version"], doc["table"]["generated_at"])
                self.receipts.setdefault(key, []).append((worker, ms))
                self.changed.set()

    def complete(self) -> list[list[tuple[int, float]]]:
        """The receipts of every update that reached every open dashboard."""
        return [r for r in self.receipts.values() if len(r) == len(self.open)]

    def partial(self) -> Counter[str]:
        """How the updates that missed some dashboard reached the workers' dashboards."""
        served = self.per_worker()
        return Counter(
            ", ".join(
                f"{n}/{served[w]} on {w}" for w, n in sorted(Counter(x for x, _ in r).items())
            )
            for r in self.receipts.values()
            if len(r) < len(self.open)
        )

    def close(self) -> None:
        for sock, (_, task) in self.open.items():
            task.cancel()
            sock.close()


async def spread_over_workers(viewers: Viewers, clients: int) -> None:
    """Open ``clients`` dashboards, then trade sockets until each worker holds at least a
    quarter of them (the kernel hands a connection to whichever worker accepts first)."""
    for _ in range(clients):
        await viewers.add()
    least = clients // (2 * len(viewers.workers))
    for _ in range(4 * clients):
        count = viewers.per_worker()
        short = [w for w in viewers.workers if count[w] < least]
        if not short:
            return
        worker = await viewers.add()
        busiest = max(viewers.workers, key=lambda w: count[w])
        viewers.drop(busiest if worker in short else worker)
    print(f"could not spread the dashboards: {dict(viewers.per_worker())}")


async def deployed_clients(
    url: str, cookie: str, workers: list[int], clients: int, updates: int, timeout_s: float
) -> dict[str, list[float]]:
    viewers = Viewers(url, cookie, workers)
    try:
        await spread_over_workers(viewers, clients)
        print(f"dashboards per uvicorn worker: {dict(viewers.per_worker())}")
        viewers.since = time.time()
        deadline = time.monotonic() + timeout_s
        while len(viewers.complete()) < updates and time.monotonic() < deadline:
            viewers.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(viewers.changed.wait(), deadline - time.monotonic())
        measured_s = time.time() - viewers.since
        done = viewers.complete()[:updates]
        partial = viewers.partial()
    finally:
        viewers.close()
    print(
        f"table updates in {measured_s:.0f} s: {len(viewers.receipts)} published, "
        f"{len(viewers.complete())} reached all {clients} dashboards ({updates} wanted)"
    )
    for reached, times in partial.most_common():
        print(f"  {times} update(s) reached only {reached}")
    if viewers.lost:
        print(f"sockets that ended early: {len(viewers.lost)}, e.g. {viewers.lost[0]}")
    results = {
        "connect+snapshot": viewers.connect_ms,
        "generated_at→receipt (table.update)": [ms for r in done for _, ms in r],
        "fan-out spread (last − first client)": [
            max(ms for _, ms in r) - min(ms for _, ms in r) for r in done
        ],
    }
    for worker in workers:
        results[f"  on worker {worker}"] = [ms for r in done for w, ms in r if w == worker]
    return results


def stop_on_signals() -> None:
    """Make Ctrl-C, SIGTERM and SIGHUP unwind through every ``finally`` (SIGINT too when
    the shell started us in the background with it ignored)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def deployed(args: argparse.Namespace) -> None:
    from trafficmgr.testing.topology.liveserver import (
        PASSWORD,
        VIEWER,
        launch_deployed,
        shutdown_deployed,
    )

    if urllib.parse.urlparse(args.database_url).scheme not in {"postgres", "postgresql"}:
        raise SystemExit(f"--deployed needs PostgreSQL, not {args.database_url}")
    stop_on_signals()
    began = time.monotonic()
    cluster = launch_deployed(args.database_url)
    left: list[str] = []
    try:
        workers = cluster.web_workers()
        print(
            f"deployed topology up in {time.monotonic() - began:.0f} s: uvicorn workers "
            f"{workers}, celery worker + beat, PostgreSQL {cluster.db_name}, {cluster.redis_url}"
        )
        session = login_cookie(cluster.url, VIEWER, PASSWORD)
        timeout_s = max(args.seconds, 5.0 * args.rounds)  # the table moves about every tick
        results = asyncio.run(
            deployed_clients(cluster.url, session, workers, args.clients, args.rounds, timeout_s)
        )
        for name, xs in results.items():
            print(summary(f"uvicorn × {len(workers)}: {name}", xs))
        dropped = cluster.process("web").text().count("channels over capacity in group")
        print(f"web log: {dropped} channel-layer group sends over capacity (channels_redis)")
        renders = first_render(cluster.url, PASSWORD)
        if renders:
            print(summary("page first render (navigation → map drawn)", renders))
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop
        try:
            left = shutdown_deployed(cluster)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if left:
        raise SystemExit(f"processes still running after SIGKILL: {left}")
    print(f"stopped every process{f' (SIGKILL for {cluster.killed})' if cluster.killed else ''}")


def first_render(url: str, password: str, runs: int = 3) -> list[float]:
    from trafficmgr.testing.topology.liveserver import (
        CHROMIUM,
        CHROMIUM_ARGS,
        VIEWER,
        browser_missing,
    )

    if browser_missing():
        print(f"first render: skipped, {browser_missing()}")
        return []
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{url}/login/?next=/")
        page.fill("input[name=username]", VIEWER)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_selector("body[data-ready=true]", timeout=15_000)
        for _ in range(runs):
            page.goto(f"{url}/")
            page.wait_for_selector("body[data-ready=true]", timeout=15_000)
            out.append(
                page.evaluate("performance.getEntriesByName('dashboard-first-render')[0].startTime")
            )
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--in-process-only", action="store_true")
    parser.add_argument(
        "--deployed",
        action="store_true",
        help="uvicorn × 2, celery, PostgreSQL, Redis as local processes (see the docstring)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", DEPLOYED_DATABASE_URL),
        help="with --deployed: the PostgreSQL server (a database of the run's own is used)",
    )
    args = parser.parse_args()
    if args.deployed:
        deployed(args)
        return

    from asgiref.sync import async_to_sync

    tmp = Path(tempfile.mkdtemp(prefix="trafficmgr-bench-ws-"))
    setup_django(tmp)
    cookie = viewer_cookie()
    print(f"dashboard WebSocket, {args.clients} clients")
    results = async_to_sync(in_process)(args.clients, args.rounds, cookie)
    for name, xs in results.items():
        print(summary(f"in process: {name}", xs))
    if args.in_process_only:
        return

    from trafficmgr.testing.topology.liveserver import (
        PASSWORD,
        VIEWER,
        HeartbeatFeeder,
        launch,
        shutdown,
    )

    server = launch()
    feeder = HeartbeatFeeder(server).start()
    try:
        time.sleep(3)  # a few ticks: regions healthy, weights moving with load
        session = login_cookie(server.url, VIEWER, PASSWORD)
        results = asyncio.run(real_server(server.url, args.clients, args.seconds, session))
        for name, xs in results.items():
            print(summary(f"daphne ({server.mode}): {name}", xs))
        renders = first_render(server.url, PASSWORD)
        if renders:
            print(summary("page first render (navigation → map drawn)", renders))
    finally:
        feeder.stop()
        shutdown(server)


if __name__ == "__main__":
    main()
