"""The GeoDNS server: asyncio listeners on UDP and TCP around the ``Responder``.

``DnsServer`` is what the CLI, the ``dnsserver`` management command and the demo embed:
``await server.start()`` binds both sockets (UDP first, then TCP on the same port, which
also works for port 0) and starts the table sources; ``set_table`` is the in-process table
source; ``metrics`` returns the counters. ``ServerThread`` runs one on its own event loop
in a thread, for callers that are not asyncio code (the demo, the socket tests).
``serve`` runs one until SIGINT/SIGTERM, in this process or in ``workers`` processes that
share the port through SO_REUSEPORT (the kernel spreads the datagrams over them); such a
process does nothing but serve, so it also keeps the garbage collector's full collections
short (``heap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from trafficmgr.dns.config import ServerConfig
from trafficmgr.dns.fleetwatch import FleetSource, follow_fleet
from trafficmgr.dns.metrics import Counters
from trafficmgr.dns.responder import Locating, Responder
from trafficmgr.dns.scrape import (
    MetricsHttp,
    WorkerLink,
    answer_on,
    links_collector,
    loop_collector,
)
from trafficmgr.dns.sources import RedisSource, watch_file
from trafficmgr.dns.tables import TableStore
from trafficmgr.dns.transport import TcpClients, TcpConnection, TcpLimits, UdpReader, udp_socket
from trafficmgr.dns.zone import ZoneData
from trafficmgr.routing.types import Fleet, RoutingTable
from trafficmgr.runtime.heap import HeapKeeper

log = logging.getLogger(__name__)

BIND_ATTEMPTS = 5
STOP_TIMEOUT_S = 10.0  # inside compose's and k8s' grace periods
EXIT_STUCK = 70  # EX_SOFTWARE: the server could not stop cleanly


def open_locator(path: str | None) -> Locating | None:
    """Open the engine's GeoIP locator; None (everyone in the default zone) if impossible."""
    from trafficmgr.geoip import Locator

    try:
        return Locator(path)
    except (OSError, ValueError) as exc:
        log.warning("no GeoIP database (%s): every client gets the default zone", exc)
        return None


class DnsServer:
    """One authoritative GeoDNS server for a fleet's zone."""

    def __init__(
        self,
        fleet: Fleet,
        config: ServerConfig | None = None,
        *,
        locator: Locating | None = None,
        geoip: bool = True,
        table: RoutingTable | None = None,
        reuse_port: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or ServerConfig()
        self.counters = Counters()
        self.store = TableStore(
            fleet, self.counters, self.config.state_file, self.config.table_file, clock
        )
        if table is not None:
            self.store.set(table, "setter")
        if locator is None and geoip:
            locator = open_locator(self.config.geoip_db)
        self.zone = ZoneData(fleet, self.config)
        self.responder = Responder(self.zone, self.store, self.config, self.counters, locator)
        self.redis: RedisSource | None = None
        self.reuse_port = reuse_port or self.config.workers > 1
        self._udp: UdpReader | None = None
        self._tcp: asyncio.Server | None = None
        self._connections = TcpClients(
            TcpLimits(
                self.config.tcp_max_connections,
                self.config.tcp_idle_timeout_s,
                self.config.tcp_max_per_client,
                self.config.tcp_message_timeout_s,
            )
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.host = self.config.host
        self.port = self.config.port
        self.metrics_address: tuple[str, int] | None = None  # where ``--metrics`` listens

    @property
    def address(self) -> tuple[str, int]:
        """Return the bound host and port (the real port once started with port 0)."""
        return self.host, self.port

    @property
    def metrics(self) -> dict[str, Any]:
        """Return the counters plus the table being served, as a plain dict."""
        out: dict[str, Any] = self.counters.as_dict()
        snapshot = self.store.snapshot
        out["table_version"] = snapshot.version
        out["table_source"] = snapshot.source
        out["cache_entries"] = self.responder.cache_entries
        out["reply_cache_entries"] = len(self.responder.replies)
        out["tcp_open"] = len(self._connections)
        out["tcp_clients"] = self._connections.clients()
        out["rrl_keys"] = len(self.responder.limiter)
        return out

    def set_table(self, table: RoutingTable) -> bool:
        """Serve ``table`` from now on (the in-process table source); thread-safe."""
        return self.store.set(table, "setter")

    @property
    def fleet(self) -> Fleet:
        """Return the fleet being served."""
        return self.zone.fleet

    def set_fleet(self, fleet: Fleet) -> None:
        """Serve a changed fleet (names, addresses, TTL, static table)."""
        zone = ZoneData(fleet, self.config)
        self.store.set_fleet(fleet)
        self.zone = zone
        self.responder.zone = zone

    def handle(self, wire: bytes, source: str, tcp: bool = False) -> bytes | None:
        """Answer one message (the responder as a function, for tests and embedding)."""
        return self.responder.handle(wire, source, tcp)

    async def start(self) -> None:
        """Bind UDP and TCP and start the table sources."""
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for _ in range(BIND_ATTEMPTS):
            sock = udp_socket(self.config.host, self.config.port, self.reuse_port)
            host, port = sock.getsockname()[:2]
            try:
                self._tcp = await loop.create_server(
                    self._tcp_connection,
                    host,
                    port,
                    reuse_address=True,
                    reuse_port=self.reuse_port or None,
                )
            except OSError as exc:  # port 0: the UDP port may be taken for TCP; try another
                sock.close()
                last = exc
                if self.config.port:
                    raise
                continue
            self._udp = UdpReader(sock, self.responder.handle_udp, self.counters)
            loop.add_reader(sock.fileno(), self._udp.on_readable)
            self.host, self.port = host, port
            break
        else:
            raise last or OSError("could not bind")
        if self.config.table_file:
            watcher = watch_file(self.store, self.config.table_file, self.config.poll_interval_s)
            self._tasks.append(asyncio.create_task(watcher))
        if self.config.redis_url:
            self.redis = RedisSource(self.config.redis_url, self.store, self.counters)
            self._tasks.append(asyncio.create_task(self.redis.run()))
        log.info(
            "GeoDNS for %s on %s:%d (udp+tcp), table %s from %s",
            self.zone.fleet.zone,
            self.host,
            self.port,
            self.store.snapshot.version,
            self.store.snapshot.source,
        )

    def _tcp_connection(self) -> TcpConnection:
        return TcpConnection(self.responder.handle, self._connections, self.counters)

    async def stop(self) -> None:
        """Close the listeners and connections, stop the sources, flush the state file."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._udp is not None:
            asyncio.get_running_loop().remove_reader(self._udp.sock.fileno())
            self._udp.sock.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            for connection in self._connections:
                connection.close()
            await self._tcp.wait_closed()
            self._tcp = None
        await asyncio.to_thread(self.store.close)

    async def serve_forever(self, stop: asyncio.Event | None = None) -> None:
        """Start, run until ``stop`` is set (or forever), then stop."""
        await self.start()
        try:
            await (stop or asyncio.Event()).wait()
        finally:
            await self.stop()


class ServerThread:
    """Runs a ``DnsServer`` on its own event loop in a daemon thread."""

    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="dns-server", daemon=True)

    def start(self, timeout: float = 10.0) -> tuple[str, int]:
        """Start the thread; return the bound address once the sockets are open."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("DNS server did not start")
        if self._error is not None:
            raise self._error
        return self.server.address

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.server.stop()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and wait for the thread."""
        if self._loop is not None and self._stop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine on uvloop when it is installed, else on asyncio's own loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def _serve_until_signal(
    server: DnsServer,
    ready: Callable[[DnsServer], None],
    fleet_source: FleetSource | None = None,
    metrics_link: Connection | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _stopping, sig, stop)
    exporter = await _start_serving(server, loop)
    if metrics_link is not None:
        answer_on(metrics_link, server, loop)
    heap = HeapKeeper()
    heap.settle()  # startup's objects live as long as the process: no collection need walk them
    background = [asyncio.create_task(heap.run())]
    if fleet_source is not None and server.config.fleet_poll_s > 0:
        following = follow_fleet(server, fleet_source, server.config.fleet_poll_s)
        background.append(asyncio.create_task(following))
    ready(server)
    try:
        await stop.wait()
    finally:
        for task in background:
            task.cancel()
        if exporter is not None:
            await asyncio.to_thread(exporter.stop)
        await _stop_within(server, STOP_TIMEOUT_S)


async def _start_serving(server: DnsServer, loop: asyncio.AbstractEventLoop) -> MetricsHttp | None:
    """Start the server, and its metrics port when asked (bound first: taken, nothing starts)."""
    exporter = None
    if server.config.metrics is not None:
        exporter = MetricsHttp(*server.config.metrics, loop_collector(server, loop))
    try:
        await server.start()
    except BaseException:
        if exporter is not None:
            exporter.stop()
        raise
    if exporter is not None:
        server.metrics_address = exporter.start().address
    return exporter


def _stopping(sig: signal.Signals, stop: asyncio.Event) -> None:
    log.info("%s: stopping", sig.name)
    stop.set()


async def _stop_within(server: DnsServer, timeout_s: float) -> None:
    """Stop the server; if that hangs, show where and leave anyway (as SIGKILL would)."""
    try:
        await asyncio.wait_for(server.stop(), timeout_s)
    except TimeoutError:
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        log.error("stopping took over %g s; exiting anyway. Tasks: %s", timeout_s, pending)
        faulthandler.dump_traceback(all_threads=True)
        logging.shutdown()
        os._exit(EXIT_STUCK)


def serve(
    fleet: Fleet,
    config: ServerConfig,
    ready: Callable[[DnsServer], None] = lambda server: None,
    reuse_port: bool = False,
    fleet_source: FleetSource | None = None,
    metrics_link: Connection | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM; with ``config.workers`` > 1, in that many processes.

    ``fleet_source`` (picklable) is read again every ``config.fleet_poll_s`` seconds by each
    process, which serves the fleet it returns when it changed (``fleetwatch``). With
    ``config.metrics``, the Prometheus endpoint runs in this process and shows every worker's
    counters (``scrape``); ``metrics_link`` is a worker's end of the pipe it is asked on.
    """
    if config.workers > 1:
        _serve_workers(fleet, config, fleet_source)
        return
    server = DnsServer(fleet, config, reuse_port=reuse_port)
    run_loop(_serve_until_signal(server, ready, fleet_source, metrics_link))


def _worker(
    fleet: Fleet,
    config: ServerConfig,
    fleet_source: FleetSource | None,
    metrics_link: Connection | None,
) -> None:
    alone = replace(config, workers=1, metrics=None)  # the parent serves the metrics port
    serve(fleet, alone, reuse_port=True, fleet_source=fleet_source, metrics_link=metrics_link)


def _serve_workers(fleet: Fleet, config: ServerConfig, fleet_source: FleetSource | None) -> None:
    """Run ``config.workers`` processes sharing the port; stop them all on a signal."""
    if config.port == 0:
        raise ValueError("several workers need a fixed port")
    context = multiprocessing.get_context("spawn")
    links: list[WorkerLink] = []
    workers = []
    for i in range(config.workers):
        ours, theirs = context.Pipe() if config.metrics is not None else (None, None)
        if ours is not None:
            links.append(WorkerLink(str(i), ours))
        args = (fleet, config, fleet_source, theirs)
        workers.append(context.Process(target=_worker, args=args, name=f"dns-worker-{i}"))
    exporter = None
    if config.metrics is not None:  # bound first: a taken port stops us before any worker
        exporter = MetricsHttp(*config.metrics, links_collector(links))
    for process in workers:
        process.start()
    if exporter is not None:
        exporter.start()
    try:
        _wait_for_workers(workers)
    finally:
        if exporter is not None:
            exporter.stop()


def _wait_for_workers(workers: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Wait until a signal or until every worker has exited; then stop them all."""
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stopping.wait(0.5):
        if not any(p.is_alive() for p in workers):
            break
    for process in workers:
        if process.is_alive():
            process.terminate()
    for process in workers:
        process.join(10)
