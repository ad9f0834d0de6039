"""The endpoint picker's gRPC server: ext_proc v3 plus the gRPC health services.

One ``Exchange`` per ext_proc stream; the servicer only moves messages between Envoy and
it, and guarantees its ``close`` runs whatever ends the stream (Envoy resetting it, the
client going away, a bug in the core), so no request stays counted in flight. Health
follows the protocol: ``liveness`` while the process answers, ``readiness`` (and the
ext_proc service name) once the decision core says it can route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from trafficmgr.epp import wire
from trafficmgr.epp.decision import Decision
from trafficmgr.epp.exchange import Exchange, ExchangeSettings

log = logging.getLogger("trafficmgr.epp")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READINESS = "readiness"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# grpcio-health-checking's asyncio servicer (``health.aio``), missing from its type stubs
AsyncHealthServicer: Any = health.aio.HealthServicer  # type: ignore[attr-defined]


class ExternalProcessor(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """The ext_proc service: runs one Exchange per stream."""

    def __init__(self, decision: Decision, settings: ExchangeSettings) -> None:
        self.decision = decision
        self.settings = settings

    async def Process(
        self,
        request_iterator: AsyncIterator[ProcessingRequest],
        context: grpc.aio.ServicerContext[ProcessingRequest, ProcessingResponse],
    ) -> AsyncIterator[ProcessingResponse]:
        exchange = Exchange(self.decision, self.settings)
        try:
            async for message in request_iterator:
                for reply in await self._answer(exchange, message):
                    yield reply
                if exchange.done:
                    return
        finally:
            exchange.close()

    async def _answer(
        self, exchange: Exchange, message: ProcessingRequest
    ) -> list[ProcessingResponse]:
        try:
            return await exchange.handle(message)
        except Exception:
            log.exception("ext_proc message failed; answering 500")
            exchange.close()
            exchange.done = True
            return [wire.immediate_response(500, "internal_error", "endpoint picker error")]


@dataclass(frozen=True, slots=True)
class ServerTls:
    """mTLS: the EPP's certificate and key, and the CA every client certificate must chain to."""

    cert: bytes
    key: bytes
    client_ca: bytes

    @classmethod
    def from_files(cls, cert: str, key: str, client_ca: str) -> ServerTls:
        """Read the three PEM files (OSError names a missing one)."""
        with open(cert, "rb") as c, open(key, "rb") as k, open(client_ca, "rb") as ca:
            return cls(c.read(), k.read(), ca.read())

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.client_ca, require_client_auth=True
        )


def server_options(max_body_bytes: int) -> list[tuple[str, int]]:
    """gRPC message limits above the body limit, so a body over it is the EPP's 413.

    A ``BUFFERED`` body comes in one message, up to Envoy's buffer (at most twice the EPP's
    limit in the generated bootstrap); gRPC's default 4 MiB would fail such a message with
    an error Envoy turns into a 500. A rewritten body goes back in one message too.
    """
    limit = 2 * max_body_bytes + (1 << 20)
    return [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]


@dataclass
class EppServer:
    """A started server and its health servicer (to flip readiness)."""

    server: grpc.aio.Server
    health: Any  # AsyncHealthServicer
    port: int

    async def set_ready(self, ready: bool) -> None:
        status = SERVING if ready else NOT_SERVING
        for service in (READINESS, EXT_PROC_SERVICE, health.OVERALL_HEALTH):
            await self.health.set(service, status)

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_server(
    decision: Decision,
    listen: str,
    settings: ExchangeSettings | None = None,
    ready: Callable[[], bool] | None = None,
    tls: ServerTls | None = None,
) -> EppServer:
    """Bind ``listen`` (``HOST:PORT``, port 0 for any, or ``unix:/PATH``) and start serving."""
    settings = settings or ExchangeSettings()
    server = grpc.aio.server(options=server_options(settings.max_body_bytes))
    processor = ExternalProcessor(decision, settings)
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(processor, server)
    health_servicer = AsyncHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if tls is not None:
        port = server.add_secure_port(listen, tls.credentials())
    else:
        port = server.add_insecure_port(listen)
    if port == 0 and not listen.startswith("unix:"):
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    started = EppServer(server, health_servicer, port)
    await health_servicer.set(LIVENESS, SERVING)
    await started.set_ready(ready() if ready is not None else True)
    return started


async def serve(
    decision: Decision,
    listen: str,
    settings: ExchangeSettings | None = None,
    maintain: Callable[[], None] | None = None,
    interval_s: float = 0.5,
    stop: asyncio.Event | None = None,
    tls: ServerTls | None = None,
) -> None:
    """Serve until ``stop`` is set (or the task is cancelled).

    ``maintain`` (the core's refresh from the control plane, blocking I/O) runs in a thread
    every ``interval_s``; readiness is reported once it first succeeds.
    """
    started = await start_server(
        decision, listen, settings, ready=lambda: maintain is None, tls=tls
    )
    log.info("endpoint picker listening on %s%s", listen, " (mTLS)" if tls else "")
    stop = stop or asyncio.Event()
    upkeep = asyncio.create_task(_maintain(started, maintain, interval_s)) if maintain else None
    try:
        await stop.wait()
    finally:
        if upkeep is not None:
            upkeep.cancel()
        await started.stop()


async def _maintain(started: EppServer, maintain: Callable[[], None], interval_s: float) -> None:
    ready = False
    while True:
        try:
            await asyncio.to_thread(maintain)
        except Exception:
            log.exception("reading the control plane failed; serving the last view")
        else:
            if not ready:
                await started.set_ready(True)
                ready = True
        await asyncio.sleep(interval_s)
