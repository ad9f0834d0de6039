"""One simulated inference server: continuous batching under the engine's service model.

The rates and their scaling with GPUs come from ``trafficmgr.routing.estimator`` (one service
model for the picker's estimates and the simulation):

- Admission: a request is admitted while fewer than ``max_concurrency x gpus`` are and its KV
  cache (input + output tokens) fits; otherwise it waits, first come first served.
- Prefill: admitted requests prefill one at a time, first come first served, at the prefill
  rate the decodes leave. Prompt blocks already in the endpoint's prefix cache (an LRU of
  block hashes as big as its KV cache) are not computed again. The first output token is
  produced by the prefill, so TTFT = queueing + prefill (+ network RTT, added by the caller).
- Decode: the other ``output - 1`` tokens are decoded at the per-request rate for the
  current batch, the same for every decoding request; a "virtual clock" counting the tokens
  each decoding request has produced makes every event O(log batch).

Nothing here decides anything. What a gateway may know of a server is ``flight``: its own
requests there, as its ledger counts them (prompt tokens until the first token, the
*estimated* output lengths the picker gave, never the true ones). ``load`` is every request's
exact state at this instant, the omniscient view no deployment has (``sim.gateways``).

Two drivers share this model: the discrete-event simulation (``sim.des``) and the live
simulated inference server (``trafficmgr.simserver.engine``), which steps it in real time and
also uses ``decoded`` (a request's tokens so far, to stream them) and ``cancel`` (a client
that went away, as vLLM aborts it).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass

from trafficmgr.routing.estimator import ServiceRates, service_rates
from trafficmgr.routing.picker import EndpointLoad
from trafficmgr.routing.prompt import BLOCK_TOKENS
from trafficmgr.routing.types import Endpoint, GpuProfile

__all__ = ["BLOCK_TOKENS", "EPS_TOKENS", "EndpointServer", "Job"]

EPS_TOKENS = 1e-6


@dataclass(slots=True)
class Job:
    """One request on a server; times are simulation seconds."""

    rid: int
    input_tokens: int
    output_tokens: int  # true length: only the server (and the oracle) read it
    expected_output: float  # what the picker expected
    hashes: tuple[int, ...] = ()
    prefill_left: float = 0.0
    decode_from: float = 0.0  # virtual clock when it started decoding
    first_token_at: float = -1.0
    arrived: float = 0.0
    cached_tokens: int = 0  # prompt tokens the prefix cache held at admission
    gateway: int = 0  # the simulated gateway process that sent it

    @property
    def kv_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class EndpointServer:
    """Continuous-batching server of one endpoint."""

    def __init__(
        self, index: int, endpoint: Endpoint, profile: GpuProfile, prefix_cache: bool = True
    ) -> None:
        self.index, self.endpoint, self.profile = index, endpoint, profile
        self.rates: ServiceRates = service_rates(profile, endpoint.gpus)
        self.up = True
        self.t = 0.0
        self.vclock = 0.0
        self.waiting: deque[Job] = deque()
        self.prefill: deque[Job] = deque()
        self.decoding: list[tuple[float, int, Job]] = []
        self.kv_used = 0
        self.prefill_backlog = 0.0  # prefill tokens left over the admitted queue
        self.waiting_input = 0  # input tokens of the requests not admitted yet
        self.queued_expected = 0.0  # expected output of the requests not decoding yet
        self.prefill_done = 0.0  # tokens computed, for utilisation
        self.decode_done = 0.0
        self.version = 0  # bumped whenever the next event may have moved
        self.cache: OrderedDict[int, None] | None = OrderedDict() if prefix_cache else None
        self.cache_blocks = int(self.rates.kv_capacity_tokens // BLOCK_TOKENS)
        self.recent_ttfts: list[float] = []  # server-side TTFTs since the last heartbeat

    # --- time -------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Run the fluid model up to ``now`` (no event may lie in between)."""
        dt = now - self.t
        if dt <= 0.0:
            return
        self.t = now
        b = len(self.decoding)
        if b:
            r = self.rates.decode_rate(b)
            self.vclock += r * dt
            self.decode_done += b * r * dt
        if self.prefill:
            done = min(self.prefill[0].prefill_left, self.rates.prefill_rate(b) * dt)
            self.prefill[0].prefill_left -= done
            self.prefill_backlog -= done
            self.prefill_done += done

    def next_event(self) -> float:
        """Return when the next prefill or decode finishes (inf when idle)."""
        when = float("inf")
        b = len(self.decoding)
        if b:
            when = self.t + (self.decoding[0][0] - self.vclock) / self.rates.decode_rate(b)
        if self.prefill:
            rate = self.rates.prefill_rate(b)
            when = min(when, self.t + self.prefill[0].prefill_left / rate)
        return when

    def step(self, now: float) -> tuple[list[Job], list[Job]]:
        """Advance to ``now``; return the jobs that got their first token and that finished."""
        self.advance(now)
        first: list[Job] = []
        finished: list[Job] = []
        while self.decoding and self.decoding[0][0] <= self.vclock + EPS_TOKENS:
            finished.append(self._release(heapq.heappop(self.decoding)[2]))
        while self.prefill and self.prefill[0].prefill_left <= EPS_TOKENS:
            job = self.prefill.popleft()
            self.prefill_backlog -= job.prefill_left
            job.first_token_at = now
            self.recent_ttfts.append(now - job.arrived)
            self.queued_expected -= job.expected_output
            first.append(job)
            if job.output_tokens <= 1:
                finished.append(self._release(job))
            else:
                job.decode_from = self.vclock
                end = self.vclock + job.output_tokens - 1
                heapq.heappush(self.decoding, (end, job.rid, job))
        if finished:
            self._admit()
        self.version += 1
        return first, finished

    # --- requests ---------------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        """Take a new request."""
        self.advance(now)
        job.arrived = now
        self.waiting.append(job)
        self.waiting_input += job.input_tokens
        self.queued_expected += job.expected_output
        self._admit()
        self.version += 1

    def fail(self, now: float) -> list[Job]:
        """Go down: every request in flight is lost; return them."""
        self.advance(now)
        lost = list(self.waiting) + list(self.prefill) + [e[2] for e in self.decoding]
        self.waiting.clear()
        self.prefill.clear()
        self.decoding.clear()
        self.kv_used = self.waiting_input = 0
        self.prefill_backlog = self.queued_expected = 0.0
        self.up = False
        if self.cache is not None:
            self.cache.clear()
        self.version += 1
        return lost

    def cancel(self, job: Job, now: float) -> bool:
        """Drop a request wherever it is (its client went away); return whether it was here."""
        self.advance(now)
        if _remove(self.waiting, job):
            self.waiting_input -= job.input_tokens
            self.queued_expected -= job.expected_output
        elif _remove(self.prefill, job):
            self.prefill_backlog -= job.prefill_left
            self.queued_expected -= job.expected_output
            self._release(job)
        else:
            kept = [e for e in self.decoding if e[2] is not job]
            if len(kept) == len(self.decoding):
                return False
            heapq.heapify(kept)
            self.decoding = kept
            self._release(job)
        self._admit()
        self.version += 1
        return True

    def decoded(self, job: Job) -> int:
        """Return the output tokens a request has produced so far (0 before its first)."""
        if job.first_token_at < 0.0:
            return 0
        done = 1 + int(self.vclock - job.decode_from + EPS_TOKENS)
        return min(job.output_tokens, done)

    def _admit(self) -> None:
        slots = self.rates.max_concurrency
        room = self.rates.kv_capacity_tokens
        while self.waiting:
            job = self.waiting[0]
            admitted = len(self.prefill) + len(self.decoding)
            if admitted and (admitted >= slots or self.kv_used + job.kv_tokens > room):
                return
            self.waiting.popleft()
            self.waiting_input -= job.input_tokens
            self.kv_used += job.kv_tokens
            job.cached_tokens = min(job.input_tokens, self._cache_hit(job.hashes))
            job.prefill_left = float(max(1, job.input_tokens - job.cached_tokens))
            self.prefill_backlog += job.prefill_left
            self.prefill.append(job)

    def _release(self, job: Job) -> Job:
        self.kv_used -= job.kv_tokens
        return job

    def _cache_hit(self, hashes: tuple[int, ...]) -> int:
        """Return the prompt tokens the prefix cache holds, and add the prompt's blocks."""
        cache = self.cache
        if cache is None or not hashes:
            return 0
        held = self.held_prefix(hashes)
        for h in hashes:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
        while len(cache) > self.cache_blocks:
            cache.popitem(last=False)
        return held * BLOCK_TOKENS

    def held_prefix(self, hashes: tuple[int, ...]) -> int:
        """Return how many leading blocks of a prompt the prefix cache holds."""
        cache = self.cache
        if cache is None:
            return 0
        n = 0
        for h in hashes:
            if h not in cache:
                break
            n += 1
        return n

    # --- the gateway's view -----------------------------------------------------------

    def load(
        self, healthy: bool, hashes: tuple[int, ...], gpu_util: float, latency_ewma_ms: float
    ) -> EndpointLoad:
        """Return the picker's view: live counters and *estimated* remaining output."""
        decoding = self.decoding
        v = self.vclock
        decode_left = self.queued_expected + sum(
            max(0.0, j.expected_output - 1 - (v - j.decode_from)) for _, _, j in decoding
        )
        queued = len(self.prefill) + len(self.waiting)
        held = self.held_prefix(hashes) if hashes else 0
        return EndpointLoad(
            self.endpoint,
            self.profile,
            healthy=healthy,
            running=len(decoding) + (1 if self.prefill else 0),
            waiting=max(0, queued - 1) if self.prefill else queued,
            outstanding_prefill_tokens=self.prefill_backlog + self.waiting_input,
            outstanding_decode_tokens=decode_left,
            kv_cache_usage=min(1.0, self.kv_used / self.rates.kv_capacity_tokens),
            gpu_util=gpu_util,
            latency_ewma_ms=latency_ewma_ms,
            cached_prefixes=frozenset(hashes[:held]) if held else frozenset(),
        )

    def flights(self) -> dict[int, tuple[int, float, float]]:
        """Return every gateway's ``flight`` here, in one pass over the requests."""
        out: dict[int, list[float]] = {}
        for queue in (self.waiting, self.prefill):
            for job in queue:
                f = out.get(job.gateway)
                if f is None:
                    f = out[job.gateway] = [0.0, 0.0, 0.0]
                f[0] += 1
                f[1] += job.input_tokens
                f[2] += job.expected_output
        v = self.vclock
        for _, _, job in self.decoding:
            f = out.get(job.gateway)
            if f is None:
                f = out[job.gateway] = [0.0, 0.0, 0.0]
            f[0] += 1
            f[2] += max(0.0, job.expected_output - 1 - (v - job.decode_from))
        return {g: (int(f[0]), f[1], f[2]) for g, f in out.items()}

    def flight(self, gateway: int) -> tuple[int, float, float]:
        """Return one gateway's requests here as its ledger counts them: how many, prompt
        tokens before their first token, expected output tokens still to come."""
        running, prefill, decode = 0, 0.0, 0.0
        for queue in (self.waiting, self.prefill):
            for job in queue:
                if job.gateway == gateway:
                    running += 1
                    prefill += job.input_tokens
                    decode += job.expected_output
        v = self.vclock
        for _, _, job in self.decoding:
            if job.gateway == gateway:
                running += 1
                decode += max(0.0, job.expected_output - 1 - (v - job.decode_from))
        return running, prefill, decode

    def work_done_s(self) -> float:
        """Return the GPU-seconds at full rate this server has worked so far."""
        return self.rates.work_s(self.prefill_done, self.decode_done)


def _remove(queue: deque[Job], job: Job) -> bool:
    """Remove ``job`` (by identity) from ``queue``; return whether it was there."""
    for i, queued in enumerate(queue):
        if queued is job:
            del queue[i]
            return True
    return False
