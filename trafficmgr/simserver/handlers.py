"""HTTP handling of one simulated endpoint: the OpenAI paths, health, metrics and faults.

Built on aiohttp's low-level server (no router, no middleware: a dict from method and path
to a coroutine), because this server is the backend of the gateway's overhead benchmarks
and its own cost per request must stay small next to what it measures. A generation request
is parsed once, submitted to the endpoint's model (``engine.LiveEndpoint``) and then only
awaited: a non-streamed one on its end, a streamed one on its first token and afterwards by
sleeping until its next token is due (never less than the ``Pacer``'s interval, so a
thousand streams wake a bounded number of times per second; tokens due meanwhile go out
together, one SSE event each). Whatever way a handler leaves, its request leaves the model
(``LiveEndpoint.cancel``, a no-op once it ended), as vLLM aborts a request whose client
disconnected; the server cancels handlers on disconnect (``handler_cancellation``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec
from aiohttp import web

from trafficmgr.simserver import metrics, output
from trafficmgr.simserver.engine import Flight, LiveEndpoint
from trafficmgr.simserver.faults import NO_FAULT, Fault, FaultError, FaultKind, fault_from_dict
from trafficmgr.simserver.protocol import Generation, RequestError, parse_generation
from trafficmgr.simserver.responses import DONE, Reply, error_body

JSON = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
SetFault = Callable[[str, Fault], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Settings every endpoint of one process shares."""

    max_model_len: int = 131072
    max_body_bytes: int = 8 * 1024 * 1024
    seed: int = 0
    output_median: float = output.DEFAULT_MEDIAN
    stream_interval_s: float = 0.005  # a stream never wakes more often than this
    wakeups_per_s: float = 8000.0  # ... nor all streams together more often than this


class Pacer:
    """How often a stream may wake: rarer as the process holds more streams."""

    __slots__ = ("active", "floor", "per_s")

    def __init__(self, options: ServeOptions) -> None:
        self.active = 0
        self.floor, self.per_s = options.stream_interval_s, options.wakeups_per_s

    def interval(self) -> float:
        return max(self.floor, self.active / self.per_s)


class FaultState:
    """An endpoint's current fault, and an event that fires whenever it changes."""

    def __init__(self, seed: int) -> None:
        self.fault = NO_FAULT
        self.changed = asyncio.Event()
        self._rng = random.Random(seed)

    def set(self, fault: Fault) -> None:
        self.fault = fault
        event, self.changed = self.changed, asyncio.Event()
        event.set()

    def errors_now(self) -> bool:
        fault = self.fault
        return fault.kind is FaultKind.ERROR and self._rng.random() < fault.rate

    async def until_not(self, kind: FaultKind) -> None:
        while self.fault.kind is kind:
            await self.changed.wait()


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def error_response(status: int, code: str, message: str, param: str | None = None) -> web.Response:
    return json_response(error_body(status, code, message, param), status)


class EndpointHandler:
    """Serves one endpoint; ``__call__`` is the aiohttp low-level request handler."""

    def __init__(
        self,
        live: LiveEndpoint,
        options: ServeOptions,
        pacer: Pacer,
        faults: dict[str, FaultState],
        set_fault: SetFault,
    ) -> None:
        self.live, self.options, self.pacer = live, options, pacer
        self.name = live.endpoint.name
        self.faults, self.fault, self.set_fault = faults, faults[live.endpoint.name], set_fault
        models = [
            {"id": m, "object": "model", "created": 0, "owned_by": "trafficmgr-simserver",
             "max_model_len": options.max_model_len}
            for m in live.endpoint.models
        ]  # fmt: skip
        self._models_body = msgspec.json.encode({"object": "list", "data": models})
        # connection (aiohttp protocol) -> requests being handled on it: the ``refuse`` fault
        # closes idle connections at once and busy ones after their request
        self.busy: dict[object, int] = {}
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/v1/chat/completions"): self.chat,
            ("POST", "/v1/completions"): self.completions,
            ("GET", "/v1/models"): self.models,
            ("GET", "/health"): self.health,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/admin/fault"): self.get_fault,
            ("POST", "/admin/fault"): self.post_fault,
        }

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        route = self.routes.get((request.method, request.path))
        if route is not None:
            connection, busy = request.protocol, self.busy
            busy[connection] = busy.get(connection, 0) + 1
            try:
                return await route(request)
            finally:
                left = busy.pop(connection) - 1
                if left > 0:
                    busy[connection] = left
        if any(path == request.path for _, path in self.routes):
            return error_response(405, "method_not_allowed", f"{request.method} not allowed")
        return error_response(404, "not_found", f"no route {request.path}")

    # --- plain paths -----------------------------------------------------------------------

    async def models(self, request: web.BaseRequest) -> web.StreamResponse:
        if self.fault.fault.kind is FaultKind.DOWN:
            return error_response(503, "endpoint_down", "the endpoint is down (injected fault)")
        return json_response(self._models_body)

    async def health(self, request: web.BaseRequest) -> web.StreamResponse:
        if self.fault.fault.kind is FaultKind.DOWN:
            return web.Response(status=503)
        return web.Response(status=200)

    async def metrics(self, request: web.BaseRequest) -> web.StreamResponse:
        live = self.live
        text = metrics.render(live.stats, live.gauges(), live.kv_usage())
        return web.Response(text=text, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def get_fault(self, request: web.BaseRequest) -> web.StreamResponse:
        faults = {name: state.fault.as_dict() for name, state in self.faults.items()}
        return json_response(msgspec.json.encode({"endpoint": self.name, "faults": faults}))

    async def post_fault(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            doc = msgspec.json.decode(await request.read())
            fault = fault_from_dict(doc)
        except (msgspec.DecodeError, FaultError) as exc:
            return error_response(400, "invalid_value", f"bad fault: {exc}")
        target = doc.get("endpoint", self.name)
        if not isinstance(target, str) or target not in self.faults:
            return error_response(404, "not_found", f"no endpoint {target!r} in this process")
        await self.set_fault(target, fault)
        body = {"endpoint": target, "fault": fault.as_dict()}
        return json_response(msgspec.json.encode(body))

    # --- generation ------------------------------------------------------------------------

    async def chat(self, request: web.BaseRequest) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.BaseRequest) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.BaseRequest, chat: bool) -> web.StreamResponse:
        refused = self._fault_answer(request)
        if refused is not None:
            return refused
        try:
            gen = parse_generation(
                await self._body(request), chat=chat, max_model_len=self.options.max_model_len
            )
            if gen.model not in self.live.stats:
                raise RequestError(
                    404,
                    "model_not_found",
                    f"The model `{gen.model}` does not exist on endpoint {self.name}.",
                    "model",
                )
        except RequestError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.param)
        fault = self.fault.fault
        if fault.kind is FaultKind.ERROR and self.fault.errors_now():
            return error_response(fault.status, "injected_fault", "injected server error")
        if fault.kind is FaultKind.SLOW:
            await asyncio.sleep(fault.delay_ms / 1000.0)
        return await self._serve(request, gen)

    def _fault_answer(self, request: web.BaseRequest) -> web.StreamResponse | None:
        kind = self.fault.fault.kind
        if kind is FaultKind.DOWN:
            return error_response(503, "endpoint_down", "the endpoint is down (injected fault)")
        if kind is FaultKind.REFUSE and request.transport is not None:
            request.transport.close()  # a connection opened before the port closed
            return web.Response(status=503)
        return None

    async def _body(self, request: web.BaseRequest) -> bytes:
        limit = self.options.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            raise RequestError(413, "body_too_large", f"request body over {limit} bytes")
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise RequestError(413, "body_too_large", f"request body over {limit} bytes") from None

    async def _serve(self, request: web.BaseRequest, gen: Generation) -> web.StreamResponse:
        options = self.options
        key = output.request_key(options.seed, gen.model, gen.hashes, gen.seed)
        n = output.output_length(
            key, gen.max_tokens, ignore_eos=gen.ignore_eos, min_tokens=gen.min_tokens,
            median=options.output_median,
        )  # fmt: skip
        finish = "length" if n == gen.max_tokens else "stop"
        flight = self.live.submit(gen.model, gen.input_tokens, n, gen.hashes, finish)
        try:
            if gen.stream:
                return await self._stream(request, gen, flight, output.first_word(key))
            return await self._whole(gen, flight, output.first_word(key))
        finally:
            self.live.cancel(flight)

    async def _whole(self, gen: Generation, flight: Flight, offset: int) -> web.StreamResponse:
        await flight.done
        if flight.lost:
            return error_response(503, "endpoint_down", "the endpoint went down (injected fault)")
        await self.fault.until_not(FaultKind.STALL)
        job = flight.job
        text = output.output_text(offset, job.output_tokens)
        body = Reply(gen).whole(text, job.output_tokens, flight.finish, job.cached_tokens)
        return json_response(body)

    async def _stream(
        self, request: web.BaseRequest, gen: Generation, flight: Flight, offset: int
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        self.pacer.active += 1
        try:
            await response.prepare(request)  # headers now; the first token when prefilled
            await flight.first
            await self._stream_tokens(response, Reply(gen), flight, offset)
        except ConnectionError:
            pass  # the client went away; ``_serve`` drops its request
        finally:
            self.pacer.active -= 1
        return response

    async def _stream_tokens(
        self, response: web.StreamResponse, reply: Reply, flight: Flight, offset: int
    ) -> None:
        live, job = self.live, flight.job
        n, sent, opening = job.output_tokens, 0, reply.opening()
        while True:
            await self.fault.until_not(FaultKind.STALL)
            live.sync()
            if flight.lost:
                down = reply.error_event(503, "endpoint_down", "the endpoint went down")
                await response.write(down + DONE)
                return
            produced = live.decoded(flight)
            if produced > sent:
                pieces = output.streamed_text(offset, sent, produced)
                data = reply.tokens(pieces, flight.finish if produced >= n else None)
                if sent == 0:
                    data = opening + data
                sent = produced
                if sent >= n:
                    usage = (
                        reply.usage_event(n, job.cached_tokens) if reply.gen.include_usage else b""
                    )
                    await response.write(data + usage + DONE)
                    await response.write_eof()
                    return
                await response.write(data)
            delay = live.next_token_s(flight, sent)
            await asyncio.sleep(max(delay, self.pacer.interval()))
