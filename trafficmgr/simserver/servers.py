"""Start and stop the simulated endpoints of one process, in a running loop or in a thread.

``async with SimServers(specs) as servers`` serves every spec on its own listening socket
(port 0 binds a free one; ``servers.address(name)`` says which) and stops them all on exit.
``SimServerThread`` does the same on a private event loop in a daemon thread, for
synchronous callers (tests with blocking clients, the demo). Both expose ``set_fault``, which
also does what a fault means for the socket: ``refuse`` closes the listening socket and the
idle keep-alive connections, and any other kind reopens it on the same port.

All endpoints share one model clock (so ``--time-scale`` applies to all alike), one set of
options and one stream pacer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web

try:
    import uvloop
except ImportError:  # optional: the server works, slower, on asyncio's own loop
    uvloop = None  # type: ignore[assignment]

from trafficmgr.simserver.engine import Clock, LiveEndpoint
from trafficmgr.simserver.faults import Fault, FaultKind
from trafficmgr.simserver.handlers import EndpointHandler, FaultState, Pacer, ServeOptions
from trafficmgr.simserver.layout import EndpointSpec

T = TypeVar("T")
BACKLOG = 4096
SHUTDOWN_TIMEOUT_S = 0.5  # streams still open when the server stops are cut after this


@dataclass(slots=True)
class _Served:
    spec: EndpointSpec
    live: LiveEndpoint
    handler: EndpointHandler
    server: web.Server
    runner: web.ServerRunner
    site: web.TCPSite | None
    port: int
    timer: asyncio.TimerHandle | None = None  # clears a fault with ``duration_s``


class SimServers:
    """The simulated endpoints of one process (use ``async with`` or start/stop)."""

    def __init__(
        self,
        specs: Sequence[EndpointSpec],
        *,
        time_scale: float = 1.0,
        options: ServeOptions | None = None,
        faults: Mapping[str, Fault] | None = None,
    ) -> None:
        names = [s.endpoint.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError("endpoint names must be unique")
        unknown = set(faults or {}) - set(names)
        if unknown:
            raise ValueError(f"fault for unknown endpoint(s): {', '.join(sorted(unknown))}")
        self.specs = tuple(specs)
        self.time_scale = time_scale
        self.options = options or ServeOptions()
        self._initial_faults = dict(faults or {})
        self._served: dict[str, _Served] = {}
        self._states: dict[str, FaultState] = {}

    async def __aenter__(self) -> SimServers:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Bind every endpoint's socket and start serving."""
        clock, pacer = Clock(self.time_scale), Pacer(self.options)
        for i, spec in enumerate(self.specs):
            self._states[spec.endpoint.name] = FaultState(self.options.seed + i)
        try:
            for i, spec in enumerate(self.specs):
                await self._serve(i, spec, clock, pacer)
        except BaseException:
            await self.stop()
            raise
        for name, fault in self._initial_faults.items():
            await self.set_fault(name, fault)

    async def _serve(self, index: int, spec: EndpointSpec, clock: Clock, pacer: Pacer) -> None:
        options = self.options
        live = LiveEndpoint(index, spec.endpoint, spec.profile, clock, options.max_model_len)
        handler = EndpointHandler(live, options, pacer, self._states, self.set_fault)

        def request_factory(*args: Any) -> web.BaseRequest:
            message, payload, protocol, writer, task = args
            return web.BaseRequest(
                message, payload, protocol, writer, task, asyncio.get_running_loop(),
                client_max_size=options.max_body_bytes,
            )  # fmt: skip

        server = web.Server(
            handler, request_factory=request_factory, handler_cancellation=True, access_log=None
        )
        runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        served = _Served(spec, live, handler, server, runner, None, spec.port)
        self._served[spec.endpoint.name] = served
        await self._open(served)

    async def _open(self, served: _Served) -> None:
        site = web.TCPSite(
            served.runner, served.spec.host, served.port, backlog=BACKLOG, reuse_address=True
        )
        await site.start()
        served.site = site
        served.port = served.runner.addresses[0][1]

    async def stop(self) -> None:
        """Stop serving; streams still open are cut after ``SHUTDOWN_TIMEOUT_S``."""
        served, self._served = list(self._served.values()), {}
        for s in served:
            if s.timer is not None:
                s.timer.cancel()
            s.live.close()
        await asyncio.gather(*(s.runner.cleanup() for s in served), return_exceptions=True)

    def address(self, name: str) -> tuple[str, int]:
        """Return where an endpoint listens (the bound port when it asked for port 0)."""
        served = self._served[name]
        return served.spec.host, served.port

    def addresses(self) -> dict[str, tuple[str, int]]:
        return {name: self.address(name) for name in self._served}

    def url(self, name: str) -> str:
        host, port = self.address(name)
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def live(self, name: str) -> LiveEndpoint:
        return self._served[name].live

    def fault(self, name: str) -> Fault:
        return self._states[name].fault

    async def set_fault(self, name: str, fault: Fault) -> None:
        """Show ``fault`` on an endpoint from now on (``kind: none`` clears it)."""
        served, state = self._served[name], self._states[name]
        if served.timer is not None:
            served.timer.cancel()
            served.timer = None
        state.set(fault)
        if fault.kind is FaultKind.DOWN:
            served.live.fail()
        if fault.kind is FaultKind.REFUSE and served.site is not None:
            site, served.site = served.site, None
            await site.stop()
            busy = served.handler.busy
            for connection in list(served.server.connections):
                if connection in busy:
                    connection.close()  # after the request it is handling
                else:
                    # idle: close the socket now. ``close()`` alone only stops the idle
                    # connection's wait for a next request, leaving the socket open: a client
                    # reusing it would then wait for an answer that never comes.
                    connection.force_close()
        elif fault.kind is not FaultKind.REFUSE and served.site is None:
            await self._open(served)
        if fault.duration_s is not None and fault.kind is not FaultKind.NONE:
            loop = asyncio.get_running_loop()
            served.timer = loop.call_later(fault.duration_s, self._expire, name)

    def _expire(self, name: str) -> None:
        if name in self._served:
            self._served[name].timer = None
            task = asyncio.ensure_future(self.set_fault(name, Fault()))
            task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        asyncio.get_running_loop().call_exception_handler(
            {"message": "clearing a fault failed", "exception": task.exception()}
        )


def new_event_loop() -> asyncio.AbstractEventLoop:
    """Return a uvloop loop when uvloop is installed, else asyncio's default one."""
    if uvloop is None:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class SimServerThread:
    """``SimServers`` on a private event loop in a daemon thread (``with`` or start/stop)."""

    def __init__(self, specs: Sequence[EndpointSpec], **kwargs: Any) -> None:
        self.servers = SimServers(specs, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SimServerThread:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> dict[str, tuple[str, int]]:
        """Start serving; return every endpoint's bound address."""
        loop = new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="simserver", daemon=True)
        self._thread.start()
        try:
            self.call(self.servers.start())
        except BaseException:
            self.stop()
            raise
        return self.servers.addresses()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run a coroutine on the servers' loop and return its result."""
        assert self._loop is not None, "not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def set_fault(self, name: str, fault: Fault) -> None:
        self.call(self.servers.set_fault(name, fault))

    def url(self, name: str) -> str:
        return self.servers.url(name)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            self.call(self.servers.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10.0)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None
