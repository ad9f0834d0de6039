"""Run the gateway: one uvloop event loop per worker process, sharing the port.

``serve`` is what ``python manage.py gateway`` and ``python -m trafficmgr.gateway`` call.
Each worker has its own ``RequestPath`` (its own in-flight view, pickers and outlier state)
and its own pooled client to the endpoints; workers bind the same port with ``SO_REUSEPORT``
and the kernel spreads connections across them. A worker refreshes its view of the control
plane from a thread (``Maintainer``: the source may block on a database or Redis), never on
the event loop. SIGINT or SIGTERM drains: the listener closes, requests in flight get
``shutdown_timeout_s`` to finish, then the process exits. With several workers, each writes
its metrics to a directory they share (``GatewaySettings.metrics_dir``, a temporary one made
here unless given), so that a scrape of any worker answers for all of them.

``start_gateway`` runs one on the caller's loop (tests, benchmarks). The HTTP server under the
routes is the project's own (``http``) unless ``GatewaySettings.http_server`` is ``uvicorn``
(``asgi``: the same handler as an ASGI application).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import uvloop

from trafficmgr.gateway.app import GatewayApp
from trafficmgr.gateway.asgi import UvicornServer
from trafficmgr.gateway.http import HttpServer
from trafficmgr.gateway.metrics import SHARE_S
from trafficmgr.gateway.settings import HTTP_SERVERS, GatewaySettings
from trafficmgr.requestpath import ControlPlane, RequestPath, RequestPathConfig
from trafficmgr.requestpath.shared import start_sharing
from trafficmgr.requestpath.shared.config import Sharing
from trafficmgr.routing.residency import untrusted_proxy_warning

log = logging.getLogger("trafficmgr.gateway")

SourceArg = ControlPlane | Callable[[], ControlPlane]
GC_GEN0_THRESHOLD = 20_000


class Maintainer:
    """Refresh a core's control-plane view from a thread, every ``loads_ttl_s``."""

    def __init__(self, core: RequestPath) -> None:
        self.core = core
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-maintain", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        period = max(0.05, self.core.config.loads_ttl_s)
        while not self._stop.wait(period):
            try:
                self.core.maintain()
            except Exception:  # keep serving from the last good view
                log.warning("reading the control plane failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass(slots=True)
class RunningGateway:
    """A gateway serving on the current event loop."""

    core: RequestPath
    app: GatewayApp
    server: HttpServer | UvicornServer
    host: str
    port: int
    maintainer: Maintainer
    shutdown_timeout_s: float
    publisher: asyncio.Task[None] | None = None
    sharing: Sharing | None = None

    @property
    def base_url(self) -> str:
        """Return the OpenAI base URL (``http://HOST:PORT/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    async def stop(self) -> None:
        """Stop listening, let requests in flight finish, stop the maintainer."""
        self.maintainer.stop()
        await self.server.stop(self.shutdown_timeout_s)
        if self.publisher is not None:
            self.publisher.cancel()
        if self.sharing is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.sharing.stop)
        self.app.metrics.publish()  # the final figures, for the workers still running
        await self.app.stop()


async def start_gateway(
    core: RequestPath,
    settings: GatewaySettings | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    reuse_port: bool = False,
) -> RunningGateway:
    """Serve ``core`` on ``host:port`` (0: any free port) on the running loop."""
    settings = settings or GatewaySettings()
    if settings.http_server not in HTTP_SERVERS:
        raise ValueError(
            f"http_server: one of {', '.join(HTTP_SERVERS)}, got {settings.http_server!r}"
        )
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, core.maintain)
    await loop.run_in_executor(None, core.warm)  # e.g. open the GeoIP database now
    # the others' work and prompt blocks merged before the first request: a new worker decides warm
    sharing = await loop.run_in_executor(None, start_sharing, core)
    if not settings.trusted_proxies and (warning := untrusted_proxy_warning(core.snapshot().fleet)):
        log.warning("gateway: %s", warning)
    app = GatewayApp(core, settings)
    server = _http_server(app, settings)
    bound = await server.start(host, port, reuse_port=reuse_port)
    maintainer = Maintainer(core)
    maintainer.start()
    publisher = loop.create_task(_publish(app)) if settings.metrics_dir else None
    return RunningGateway(
        core, app, server, host, bound, maintainer, settings.shutdown_timeout_s, publisher, sharing
    )


def _http_server(app: GatewayApp, settings: GatewaySettings) -> HttpServer | UvicornServer:
    """Return the HTTP server ``settings.http_server`` names, serving ``app``."""
    if settings.http_server == "uvicorn":
        return UvicornServer(
            app,
            app.refusal,
            max_body_bytes=settings.max_body_bytes,
            limits=settings.client_limits,
            shutdown_timeout_s=settings.shutdown_timeout_s,
        )
    return HttpServer(
        app,
        app.refusal,
        max_body_bytes=settings.max_body_bytes,
        limits=settings.client_limits,
        uncapped=settings.trusted_proxies,  # a proxy's connections carry many clients
    )


async def _publish(app: GatewayApp) -> None:
    """Write this worker's metrics for the others every ``SHARE_S``."""
    while True:
        app.metrics.publish()
        await asyncio.sleep(SHARE_S)


def quiet_gc() -> None:
    """Make the collector cheap on the request path: a request allocates a few hundred
    objects, so the default gen-0 threshold (700) ran a collection every request or two;
    what was loaded at start (modules, the fleet, the tables) is frozen out of every later
    collection. Reference counting still frees almost everything at once."""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), gen1, gen2)


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:8080`` for IPv6); raise ValueError."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--listen: expected HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def serve(
    source: SourceArg,
    listen: str,
    region: str | None = None,
    workers: int = 1,
    *,
    settings: GatewaySettings | None = None,
    config: RequestPathConfig | None = None,
) -> None:
    """Serve the gateway until SIGINT/SIGTERM (see the module doc).

    ``source`` may be a factory (a class, or any callable returning a source): it is then
    called in each worker process after the fork, which suits a source holding database or
    Redis connections.
    """
    host, port = parse_listen(listen)
    config = replace(config or RequestPathConfig(), region=region)
    settings = settings or GatewaySettings()
    if workers <= 1:
        _worker(source, host, port, config, settings, False)
        return
    made = None
    if settings.metrics_dir is None:
        try:
            made = tempfile.mkdtemp(prefix="trafficmgr-gateway-metrics-")
            settings = replace(settings, metrics_dir=made)
        except OSError as exc:  # e.g. a read-only file system: serve, each its own figures
            log.warning("/metrics per worker only: no directory to share them (%s)", exc)
    try:
        _fork_workers(source, host, port, config, settings, workers)
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _fork_workers(
    source: SourceArg,
    host: str,
    port: int,
    config: RequestPathConfig,
    settings: GatewaySettings,
    workers: int,
) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_worker, args=(source, host, port, config, settings, True))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for p in procs:
        p.join()


def _worker(
    source: SourceArg,
    host: str,
    port: int,
    config: RequestPathConfig,
    settings: GatewaySettings,
    reuse_port: bool,
) -> None:
    core = RequestPath(_built(source), config)
    uvloop.run(_serve_until_signal(core, settings, host, port, reuse_port))


def _built(source: SourceArg) -> ControlPlane:
    """Return the source, calling it first when it is a factory (a class counts as one)."""
    if isinstance(source, type) or not isinstance(source, ControlPlane):
        made: ControlPlane = source()
        return made
    return source


async def _serve_until_signal(
    core: RequestPath, settings: GatewaySettings, host: str, port: int, reuse_port: bool
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    gateway = await start_gateway(core, settings, host, port, reuse_port=reuse_port)
    quiet_gc()
    log.warning("gateway worker %d serving http://%s:%d/v1", os.getpid(), host, gateway.port)
    await stop.wait()
    await gateway.stop()
