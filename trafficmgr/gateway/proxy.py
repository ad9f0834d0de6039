"""Send a routed request to its endpoints: retries before the first byte, never after.

The plan's targets are tried in order (the pick, then its fallbacks), up to ``max_attempts``
and within the retry budget. An attempt fails before the first byte on a connect error, no
response (or, for a stream, no first event) within its timeout, a 5xx, an upstream 429, or a
body that is not what the API says; the core hears of it (``attempt_failed``: outlier
detection, in-flight accounting) and the next target is tried. Nothing has reached the client
yet, so a retry is invisible to it. An upstream 4xx other than 429 is the request's fault:
it is passed back as is, and not retried.

Once the first event of a stream is forwarded the client holds part of an answer, so the
request is never retried: an upstream that stalls (``idle_timeout_s``), breaks the
connection, sends garbage or ends with neither ``[DONE]`` nor a ``finish_reason`` (a stream
ending cleanly after one is whole: ``transformers serve`` sends no ``[DONE]``) gets its
stream closed with a clean SSE error event. A client that goes away cancels the handler
(``http``: its connection was lost): the upstream response is closed, which makes the server
abort the generation. Time a write waits on a client that does not read is the client's
(``client_limits.write_timeout_s``, then the request is cancelled), never the endpoint's idle
time; the accounting closes before the last writes, each of which that deadline bounds.
Clients get the kind of an upstream failure, never the upstream's own text (that is logged).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from trafficmgr.gateway.deadline import Deadline, DeadlineClock
from trafficmgr.gateway.errors import error_response
from trafficmgr.gateway.http import Request, Response, StreamResponse
from trafficmgr.gateway.metrics import GatewayMetrics
from trafficmgr.gateway.settings import GatewaySettings
from trafficmgr.gateway.sse import (
    BrokenStream,
    ErrorEvent,
    SseRelay,
    error_event,
    whole_usage,
)
from trafficmgr.gateway.upstream import (
    ConnectFailed,
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
)
from trafficmgr.requestpath import Outcome, Plan, RequestPath, Target, Usage
from trafficmgr.requestpath.budget import RetryBudget

if TYPE_CHECKING:
    from trafficmgr.gateway.tracing import RequestTrace

log = logging.getLogger("trafficmgr.gateway")

OK = Outcome.OK
CLIENT_GONE = ConnectionResetError  # a write after the client closed its connection


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an attempt failed before the first byte: ``message`` may reach the client, what the
    upstream sent (``detail``) only the log."""

    outcome: Outcome
    message: str
    retry_after: int | None = None
    detail: str = ""


@dataclass(slots=True)
class Exchange:
    """One client request on its way through the gateway."""

    request: Request
    plan: Plan
    body: bytes
    path: str
    stream: bool
    started: float  # perf_counter at arrival
    request_id: str
    requested_model: str
    trace: RequestTrace | None = None  # None: tracing off


class Proxy:
    """The pooled client to the endpoints and the attempt loop."""

    def __init__(
        self,
        core: RequestPath,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        loop: asyncio.AbstractEventLoop,
    ):
        self.core = core
        self.deadlines = DeadlineClock(loop)  # every attempt's timeouts, one tick for all
        self.settings = settings
        self.metrics = metrics
        self.budget = RetryBudget(settings.retry_budget_ratio, settings.retry_budget_per_s)
        fixed = {"Content-Type": "application/json"}
        if settings.upstream_api_key:
            fixed["Authorization"] = f"Bearer {settings.upstream_api_key}"
        # Cookies are never kept (one endpoint's cookies are no client's), bodies passed as is.
        self._pool = UpstreamPool(
            settings.connect_timeout_s,
            settings.keepalive_s,
            settings.max_connections,
            fixed,
            max_head_bytes=settings.upstream_max_head_bytes,
            max_headers=settings.upstream_max_headers,
            max_body_bytes=settings.upstream_max_body_bytes,
            max_buffered_bytes=settings.upstream_max_buffered_bytes,
        )

    async def close(self) -> None:
        self._pool.close()

    async def forward(self, ex: Exchange) -> Response | StreamResponse:
        """Answer the exchange from the first target that serves it (see the module doc)."""
        handle = ex.plan.handle
        try:
            self.budget.deposit()
            last: Failure | None = None
            targets = ex.plan.targets[: max(1, self.settings.max_attempts)]
            for i, target in enumerate(targets):
                if i > 0:
                    if not self.budget.allow():
                        break
                    assert last is not None
                    self.metrics.retried(last.outcome.value)
                self.core.served(handle, target.name)
                result = await self._attempt(ex, target)
                if not isinstance(result, Failure):
                    return result
                last = result
                self.core.attempt_failed(handle, result.outcome)
                if result.detail:  # the upstream's own words: for the operator, not the client
                    log.warning("%s (%s): %.300s", result.message, ex.request_id, result.detail)
                if ex.trace is not None:
                    ex.trace.attempt_failed(target, result.outcome, result.message)
            return self._exhausted(ex, last)
        finally:
            # a no-op after a normal finish; closes the accounting of a cancelled handler
            self.core.finished(handle, None, Outcome.CANCELLED)

    async def _attempt(self, ex: Exchange, target: Target) -> Response | StreamResponse | Failure:
        """Send one attempt; a Failure means nothing reached the client (retry elsewhere)."""
        s = self.settings
        headers = {"X-Request-Id": ex.request_id}
        if ex.trace is not None:
            ex.trace.attempt(target, ex.plan.model, headers)
        sent = time.perf_counter()
        wait = s.first_byte_timeout_s if ex.stream else s.request_timeout_s
        resp: UpstreamResponse | None = None
        try:
            with Deadline(wait, self.deadlines):
                resp = await self._pool.post(target.address, ex.path, ex.body, headers)
                if resp.status >= 500 or resp.status == 429:
                    return await self._refused_by(resp, target)
                if resp.status >= 400:
                    return await self._passed_back(ex, target, resp, sent)
                if not ex.stream:
                    return await self._whole(ex, target, resp, sent)
                relay = SseRelay()
                first, tokens = await self._first_event(resp, relay)
        except TimeoutError:
            _close(resp)
            return Failure(Outcome.TIMEOUT, f"{target.name}: no answer within {wait:g} s")
        # one name per except clause: were this module compiled (scripts/build_compiled.py), a
        # name two clauses bind would keep the first one's type and fail the second's check
        except ConnectFailed as refused:
            return Failure(Outcome.CONNECT_ERROR, f"{target.name}: {refused}")
        except (UpstreamError, BrokenStream) as exc:
            _close(resp)
            outcome = Outcome.SERVER_ERROR if isinstance(exc, ErrorEvent) else Outcome.BROKEN
            kind, detail = _kind(exc), str(exc)
            detail = "" if detail == kind else detail  # logged when it says more than the kind
            return Failure(outcome, f"{target.name}: {kind}", detail=detail)
        except BaseException:
            _close(resp)  # the client went away: abort the generation upstream
            raise
        try:
            return await self._stream(ex, target, resp, sent, relay, first, tokens)
        finally:
            resp.close()

    async def _first_event(self, resp: UpstreamResponse, relay: SseRelay) -> tuple[bytes, int]:
        """Read until the first complete event; raise BrokenStream if the stream ends first."""
        while True:
            chunk = await resp.readany()
            if not chunk:
                raise BrokenStream("stream ended before its first event")
            first, tokens = relay.feed(chunk)
            if relay.error is not None and not relay.tokens:
                raise ErrorEvent(f"error event before the first token: {relay.error[:300]!r}")
            if first:
                return first, tokens

    async def _refused_by(self, resp: UpstreamResponse, target: Target) -> Failure:
        """Return the failure an upstream 5xx or 429 is (retried elsewhere)."""
        status = resp.status
        try:
            detail = (await resp.read(512)).decode(errors="replace")
        finally:
            resp.close()
        if status == 429:
            retry = resp.headers.get("retry-after", "")
            after = int(retry) if retry.isdigit() else None
            return Failure(Outcome.THROTTLED, f"{target.name}: 429", after, detail)
        return Failure(Outcome.SERVER_ERROR, f"{target.name}: {status}", detail=detail)

    def _headers(
        self, ex: Exchange, target: Target, sent: float, content_type: str
    ) -> dict[str, str]:
        return {
            "x-request-id": ex.request_id,
            "x-trafficmgr-region": target.region,
            "x-trafficmgr-endpoint": target.name,
            "x-trafficmgr-reason": header_text(ex.plan.reason),
            "x-trafficmgr-overhead-ms": f"{(sent - ex.started) * 1000:.3f}",
            "Content-Type": content_type,
        }

    async def _passed_back(
        self, ex: Exchange, target: Target, resp: UpstreamResponse, sent: float
    ) -> Response:
        """Hand an upstream 4xx back to the client unchanged (the request's fault)."""
        body = await resp.read()
        self.core.finished(ex.plan.handle, None, Outcome.CLIENT_ERROR)
        self._answered(ex, target, resp.status, None, None, Outcome.CLIENT_ERROR)
        return Response(
            status=resp.status,
            body=body,
            headers=self._headers(
                ex, target, sent, resp.headers.get("content-type", "application/json")
            ),
        )

    async def _whole(
        self, ex: Exchange, target: Target, resp: UpstreamResponse, sent: float
    ) -> Response | Failure:
        body = resp.arrived() or await resp.read()
        try:
            usage = whole_usage(body)
        except msgspec.DecodeError:
            return Failure(Outcome.BROKEN, f"{target.name}: a response that is not JSON")
        self.core.finished(ex.plan.handle, usage, Outcome.OK)
        self._answered(ex, target, 200, time.perf_counter() - ex.started, usage, OK)
        return Response(
            body=body,
            headers=self._headers(ex, target, sent, "application/json"),
        )

    async def _stream(
        self,
        ex: Exchange,
        target: Target,
        resp: UpstreamResponse,
        sent: float,
        relay: SseRelay,
        first: bytes,
        tokens: int,
    ) -> StreamResponse:
        """Commit to this endpoint: forward the first event, then the rest as it comes."""
        out = StreamResponse(headers=self._headers(ex, target, sent, "text/event-stream"))
        out.headers["Cache-Control"] = "no-cache"
        ttft = time.perf_counter() - ex.started
        if tokens:
            self.core.progress(ex.plan.handle, tokens)
        if not (
            await self._to_client(out.prepare(ex.request))
            and await self._to_client(out.write(first))
        ):
            self.core.finished(ex.plan.handle, None, Outcome.CANCELLED)
            if ex.trace is not None:
                ex.trace.answered(200, None, Outcome.CANCELLED, ttft)
            return out
        outcome, why = await self._relay(ex, resp, relay, out)
        if relay.done and outcome is not Outcome.CANCELLED:
            outcome = _ended(relay)  # whatever happened after [DONE] cost the client nothing
        if relay.error is not None and outcome is not Outcome.CANCELLED:
            outcome = Outcome.SERVER_ERROR  # the upstream's error event was passed on as is
            why = ""
        usage = relay.usage() or Usage(0, relay.tokens)  # prompt tokens: the core's count
        # accounting before the last writes: a client that reads nothing more must not keep
        # the endpoint counted busy while they wait
        self.core.finished(ex.plan.handle, usage, outcome)
        self._answered(ex, target, 200, ttft, usage, outcome)
        if outcome is Outcome.CANCELLED:
            return out
        if outcome is not Outcome.OK and why:
            event = error_event(f"upstream {target.name}: {why}", outcome.value)
            if not await self._to_client(out.write(event)):
                return out  # not ended: the connection is cut, not closed cleanly
        await self._to_client(out.write_eof())
        return out

    async def _to_client(self, write: Coroutine[Any, Any, None]) -> bool:
        """Await one write to the client within the client-write deadline; tell whether it
        went out (a client gone or not reading for that long is not waited for)."""
        try:
            with Deadline(self.settings.client_limits.write_timeout_s, self.deadlines):
                await write
        except (CLIENT_GONE, TimeoutError):
            return False
        return True

    async def _relay(
        self, ex: Exchange, resp: UpstreamResponse, relay: SseRelay, out: StreamResponse
    ) -> tuple[Outcome, str]:
        """Forward the rest of the stream; return how it ended."""
        idle = self.settings.idle_timeout_s
        write_s = self.settings.client_limits.write_timeout_s
        handle, progress = ex.plan.handle, self.core.progress
        writing = False
        try:
            with Deadline(idle, self.deadlines) as deadline:
                while True:
                    chunk = await resp.readany()
                    if not chunk:
                        break
                    data, tokens = relay.feed(chunk)
                    if tokens:
                        progress(handle, tokens)
                    if relay.done:  # the answer is whole: close its accounting before the
                        # client reads its end (the upstream's own end follows at once)
                        usage = relay.usage() or Usage(0, relay.tokens)
                        self.core.finished(handle, usage, _ended(relay))
                    if data:
                        # while the client's back-pressure holds the write, the time is the
                        # client's (its write deadline), not the endpoint's idle time
                        writing, deadline.idle_s = True, write_s
                        deadline.touch()
                        await out.write(data)
                        writing, deadline.idle_s = False, idle
                    deadline.touch()
        except TimeoutError:
            if writing:
                return Outcome.CANCELLED, f"the client read nothing for {write_s:g} s"
            return Outcome.STALLED, f"no data for {idle:g} s"
        except (BrokenStream, UpstreamError) as exc:
            endpoint = out.headers.get("x-trafficmgr-endpoint")
            log.warning("stream from %s broke (%s): %.300s", endpoint, ex.request_id, exc)
            return Outcome.BROKEN, _kind(exc)
        except CLIENT_GONE:
            return Outcome.CANCELLED, "client went away"
        finally:
            resp.close()
        if not relay.complete():  # whole: [DONE], or a finish_reason or usage and a clean end
            return Outcome.BROKEN, "stream ended without [DONE] or a finish_reason"
        return Outcome.OK, ""

    def _exhausted(self, ex: Exchange, last: Failure | None) -> Response:
        """Answer when every attempt failed before the first byte."""
        headers = {"x-request-id": ex.request_id, "x-trafficmgr-region": ex.plan.region}
        if ex.trace is not None:
            ex.trace.error = f"upstream_{last.outcome.value}" if last else "retry_budget"
        if last is None:
            self.metrics.rejected("retry_budget")
            return error_response(503, "retry_budget", "retry budget spent", headers=headers)
        self.core.finished(ex.plan.handle, None, last.outcome)
        self.metrics.rejected(f"upstream_{last.outcome.value}")
        if last.outcome is Outcome.THROTTLED:
            message = f"every endpoint tried is saturated; last: {last.message}"
            return error_response(
                429,
                "upstream_saturated",
                message,
                retry_after_s=last.retry_after or 1,
                headers=headers,
            )
        status = 504 if last.outcome is Outcome.TIMEOUT else 502
        code = "upstream_timeout" if status == 504 else "upstream_error"
        return error_response(
            status, code, f"no endpoint answered; last: {last.message}", headers=headers
        )

    def _answered(
        self,
        ex: Exchange,
        target: Target,
        code: int,
        ttft: float | None,
        usage: Usage | None,
        outcome: Outcome,
    ) -> None:
        e2e = time.perf_counter() - ex.started
        self.metrics.answered(ex.requested_model, target.name, code, ttft, e2e)
        if ex.trace is not None:
            ex.trace.answered(code, usage, outcome, ttft)


def _ended(relay: SseRelay) -> Outcome:
    """Return how a stream that reached ``[DONE]`` ended: OK, unless it sent an error event."""
    return OK if relay.error is None else Outcome.SERVER_ERROR


def _kind(exc: Exception) -> str:
    """Return what failed, without what the upstream sent (messages read ``kind: detail``)."""
    return str(exc).partition(": ")[0] or type(exc).__name__


def _close(resp: UpstreamResponse | None) -> None:
    if resp is not None:
        resp.close()


_PRINTABLE = bytes(range(0x20, 0x7F))  # ASCII's printable characters, space to tilde


def header_text(text: str, limit: int = 512) -> str:
    """Return ``text`` as a safe header value: ASCII, one line, at most ``limit`` chars."""
    # the usual case, nothing to replace: what is left of the bytes once the printable ones
    # are deleted is empty (a quarter of ``str.isprintable``'s instructions, which looks up
    # each character's Unicode class)
    if text.isascii() and not text.encode("ascii").translate(None, _PRINTABLE):
        return text[:limit]
    clean = text.encode("ascii", "replace").decode().replace("\r", " ").replace("\n", " ")
    return clean[:limit]
