"""The simulator's endpoint model (``trafficmgr.sim.server.EndpointServer``) driven in real time.

The live server has no physics of its own: admission, FCFS prefill, batch-shared decode and
the prefix cache are the discrete-event simulation's, so a trace replayed against simulated
endpoints behaves as ``python -m trafficmgr.sim`` predicts. What this module adds is time:

- model time is ``(monotonic clock - start) x time_scale``;
- ``sync`` brings the model to now, first stepping through every event due since the last
  call *at that event's own model time* (as the DES would), so a late timer or a busy loop
  delays when a token is delivered, never what the model computes;
- one timer per endpoint is armed at the model's next event (a prefill or a decode ending)
  and re-armed when a new request moves that event earlier;
- a request's first token and its end resolve futures the HTTP handler awaits; between them
  a streaming handler asks ``decoded`` how many tokens exist and ``next_token_s`` when the
  next one will, so tokens are written at the modelled pace without per-token timers here.

The engine never sleeps and never blocks; everything runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from trafficmgr.routing.prompt import prefix_hashes
from trafficmgr.routing.types import Endpoint, GpuProfile
from trafficmgr.sim.server import EndpointServer, Job
from trafficmgr.simserver.metrics import Gauges, ModelStats

CACHE_SALT_BITS = 64


class Clock:
    """Model time: real monotonic seconds since start, times ``scale``."""

    __slots__ = ("scale", "start")

    def __init__(self, scale: float = 1.0) -> None:
        if not scale > 0 or math.isinf(scale):
            raise ValueError("time scale must be a positive number")
        self.scale = scale
        self.start = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self.start) * self.scale


@dataclass(slots=True, eq=False)
class Flight:
    """One request in flight on an endpoint, as its HTTP handler follows it."""

    job: Job
    model: str
    first: asyncio.Future[float]  # model time of the first token (-1: lost)
    done: asyncio.Future[float]  # model time of the end (-1: aborted)
    finish: str  # finish_reason when it completes: "length" or "stop"
    lost: bool = False  # aborted by the endpoint going down
    ended: bool = False


class LiveEndpoint:
    """One endpoint's model, stepped in real time; its counters for ``/metrics``."""

    def __init__(
        self,
        index: int,
        endpoint: Endpoint,
        profile: GpuProfile,
        clock: Clock,
        max_model_len: int,
    ) -> None:
        self.endpoint = endpoint
        self.server = EndpointServer(index, endpoint, profile)
        self.clock = clock
        self.stats = {m: ModelStats(max_model_len) for m in endpoint.models}
        self.flights: dict[int, Flight] = {}
        self._salts = {m: hash_salt(m) for m in endpoint.models}
        self._next_rid = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf  # model time the armed timer is for

    # --- requests ------------------------------------------------------------------------

    def submit(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        hashes: tuple[int, ...],
        finish: str,
    ) -> Flight:
        """Queue a request; its futures resolve at its first token and at its end."""
        loop = asyncio.get_running_loop()
        self._next_rid += 1
        salt = self._salts[model]
        job = Job(
            self._next_rid, input_tokens, output_tokens, float(output_tokens),
            tuple(h ^ salt for h in hashes),
        )  # fmt: skip
        flight = Flight(job, model, loop.create_future(), loop.create_future(), finish)
        self.flights[job.rid] = flight
        self.server.submit(job, self.sync())
        self._arm()
        return flight

    def cancel(self, flight: Flight) -> None:
        """Drop a request whose client went away (a no-op once it has ended)."""
        if flight.ended:
            return
        now = self.sync()
        produced = self.server.decoded(flight.job)
        if self.server.cancel(flight.job, now):
            self._end(flight, produced, "abort", None)
            self._arm()

    def fail(self) -> None:
        """Abort every request in flight (the endpoint went down)."""
        now = self.sync()
        for job in self.server.fail(now):
            flight = self.flights.get(job.rid)
            if flight is not None:
                flight.lost = True
                self._end(flight, self.server.decoded(job), "abort", None)
                _resolve(flight.first, -1.0)
        self.server.up = True  # the model is empty and takes requests again once allowed

    def decoded(self, flight: Flight) -> int:
        """Return the tokens a request has produced so far (call ``sync`` first)."""
        if flight.ended and not flight.lost:
            return flight.job.output_tokens
        return self.server.decoded(flight.job)

    def next_token_s(self, flight: Flight, produced: int) -> float:
        """Return the real seconds until token ``produced + 1`` exists, at today's pace."""
        server, job = self.server, flight.job
        batch = len(server.decoding)
        if flight.ended or job.first_token_at < 0.0 or batch == 0:
            return 0.0
        left = job.decode_from + produced - server.vclock
        return max(0.0, left / server.rates.decode_rate(batch) / self.clock.scale)

    # --- time ----------------------------------------------------------------------------

    def sync(self, floor: float = 0.0) -> float:
        """Step the model through every event due, then advance it to now; return now."""
        now = max(self.clock.now(), floor)
        server = self.server
        while True:
            t = server.next_event()
            if t > now:
                break
            first, finished = server.step(t)
            server.recent_ttfts.clear()
            for job in first:
                self._first(job, t)
            for job in finished:
                flight = self.flights.get(job.rid)
                if flight is not None:
                    self._end(flight, job.output_tokens, flight.finish, t)
            if not first and not finished:
                break  # rounding left a sliver of work: ``advance`` covers it
        server.advance(now)
        self._arm()
        return max(now, server.t)

    def _first(self, job: Job, t: float) -> None:
        flight = self.flights.get(job.rid)
        if flight is None:
            return
        scale = self.clock.scale
        self.stats[flight.model].prefilled(
            job.input_tokens, job.cached_tokens, (t - job.arrived) / scale
        )
        _resolve(flight.first, t)

    def _end(self, flight: Flight, produced: int, reason: str, at: float | None) -> None:
        """Account a request that left the model: finished at model time ``at``, or not."""
        flight.ended = True
        self.flights.pop(flight.job.rid, None)
        e2e = (at - flight.job.arrived) / self.clock.scale if at is not None else None
        self.stats[flight.model].ended(produced, reason, e2e)
        _resolve(flight.done, at if at is not None else -1.0)

    def _arm(self) -> None:
        """Arm the timer for the model's next event unless one as early is armed."""
        t = self.server.next_event()
        if t >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = t
        if math.isinf(t):
            self._timer = None
            return
        delay = max(0.0, (t - self.clock.now()) / self.clock.scale)
        self._timer = asyncio.get_running_loop().call_later(delay, self._wake, t)

    def _wake(self, t: float) -> None:
        self._timer, self._timer_at = None, math.inf
        self.sync(floor=t)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf

    # --- what /metrics shows ---------------------------------------------------------------

    def gauges(self) -> dict[str, Gauges]:
        """Return per model: running, waiting and tokens decoded so far by its requests."""
        self.sync()
        server = self.server
        running = dict.fromkeys(self.stats, 0)
        waiting = dict.fromkeys(self.stats, 0)
        tokens = dict.fromkeys(self.stats, 0)
        head = server.prefill[0] if server.prefill else None
        for flight in self.flights.values():
            job, model = flight.job, flight.model
            if job.first_token_at >= 0.0:
                running[model] += 1
                tokens[model] += server.decoded(job)
            elif job is head:
                running[model] += 1
            else:
                waiting[model] += 1
        return {m: Gauges(running[m], waiting[m], tokens[m]) for m in self.stats}

    def kv_usage(self) -> float:
        server = self.server
        return min(1.0, server.kv_used / server.rates.kv_capacity_tokens)


def _resolve(future: asyncio.Future[float], value: float) -> None:
    """Resolve a future its handler may have stopped awaiting (cancelled on disconnect)."""
    if not future.done():
        future.set_result(value)


def hash_salt(model: str) -> int:
    """Return a per-model salt: one model's cached blocks never serve another's prompts."""
    hashes = prefix_hashes(f"model {model}")
    return hashes[0] & ((1 << CACHE_SALT_BITS) - 1)
