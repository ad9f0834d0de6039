"""Estimates of what a request will cost: its output length and its service time on a GPU.

Output length. A gateway sees a request's input tokens and its ``max_output_tokens`` but not
how many tokens the model will generate. ``OutputLengthEstimator`` learns that distribution
online, per model, from completed requests: a log-bucketed histogram (each bucket 10 % wider
than the previous, so any quantile is within ~5 % of the truth) whose counts are halved once
they pass ``window`` observations, so it forgets old traffic at a bounded memory of ~150 floats
per model. Before the first observation a model's histogram holds ``prior_weight``
pseudo-observations at ``prior_tokens``; they fade as real data arrives. The expected output of
a request is ``E[min(L, max_output_tokens)]`` under that distribution, computed from cumulative
sums in O(log buckets) and refreshed lazily (at most every ~1.5 % of new observations).

Two finer views, learned from the same completions when the reporter gives the request's
prompt (``observe(..., input_tokens=, prefix_hashes=)``):

- by prompt size: one such histogram per model and power-of-two class of input tokens, so
  the long tail of answers (in chat traffic, short prompts get the long answers) is known per
  size; ``tail`` reads its 99th percentile;
- by prompt prefix: the last ``GROUP_KEEP`` output lengths of requests whose prompt began
  with the same first block (one application's system prompt, one conversation, one
  document), for the ``GROUPS`` most recently seen prefixes. Requests sharing a prefix tend
  to get answers of like length (on the Mooncake trace the median of a prefix's earlier
  answers misses by 25 tokens on average, against 98 for the model's median), so when a
  prefix has history ``expected`` uses its median and ``tail`` its longest.

Service model (shared by the picker's cost model and the simulator; docs/architecture.md §4 figures
are per GPU and scale with ``gpus``):

- prefill runs one prompt at a time, first come first served, at ``prefill_tokens_per_s x
  gpus`` times the share of the GPU the decodes leave (decode-first chunked prefill, as in
  vLLM's default scheduler);
- decode is shared: with ``b`` requests decoding each gets ``min(single_stream, D / b)`` tokens/s,
  where ``D = decode_tokens_per_s x gpus`` is the aggregate rate at full concurrency and
  ``single_stream = SINGLE_STREAM_FACTOR x D / max_concurrency`` (throughput grows with the
  batch until an eighth of the slots are busy, memory-bound, then is shared, compute-bound);
- at most ``max_concurrency x gpus`` requests are admitted, and their KV cache (input + output
  tokens) must fit ``KV_TOKENS_PER_SLOT x max_concurrency x gpus`` tokens.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from trafficmgr.routing.types import GpuProfile

SINGLE_STREAM_FACTOR = 8.0
KV_TOKENS_PER_SLOT = 2048
MAX_DECODE_SHARE = 0.95  # decodes never starve prefill completely (chunked prefill budget)

GROUPS = 1 << 14  # prompt prefixes whose recent output lengths are kept (LRU)
GROUP_KEEP = 8  # output lengths kept per prefix
TAIL_Q = 0.99  # the quantile ``tail`` reads when a request's prefix has no history

GROWTH = 1.1  # bucket width ratio of the output-length histogram
_LOG_GROWTH = math.log(GROWTH)
MAX_TOKENS = 1 << 20
_BUCKETS = int(math.log(MAX_TOKENS) / _LOG_GROWTH) + 2


@dataclass(frozen=True, slots=True)
class ServiceRates:
    """An endpoint's service rates: profile figures scaled by its GPU count."""

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    max_concurrency: int
    single_stream_tokens_per_s: float
    kv_capacity_tokens: float

    def decode_rate(self, batch: int) -> float:
        """Return the tokens/s each of ``batch`` decoding requests gets."""
        if batch <= 0:
            return self.single_stream_tokens_per_s
        return min(self.single_stream_tokens_per_s, self.decode_tokens_per_s / batch)

    def decode_share(self, batch: int) -> float:
        """Return the share of the GPU ``batch`` decoding requests use."""
        if batch <= 0:
            return 0.0
        used = batch * self.decode_rate(batch) / self.decode_tokens_per_s
        return min(MAX_DECODE_SHARE, used)

    def prefill_rate(self, decoding: int) -> float:
        """Return the prefill tokens/s left while ``decoding`` requests decode."""
        return self.prefill_tokens_per_s * (1.0 - self.decode_share(decoding))

    def work_s(self, input_tokens: float, output_tokens: float) -> float:
        """Return the GPU-seconds at full batch one request of this size costs."""
        return input_tokens / self.prefill_tokens_per_s + output_tokens / self.decode_tokens_per_s


_RATES_CACHE: dict[tuple[int, int], tuple[GpuProfile, ServiceRates]] = {}


def service_rates(profile: GpuProfile, gpus: int) -> ServiceRates:
    """Scale a GPU profile to an endpoint of ``gpus`` GPUs (cached by profile identity)."""
    key = (id(profile), gpus)
    hit = _RATES_CACHE.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    n = max(1, gpus)
    concurrency = max(1, profile.max_concurrency * n)
    decode = profile.decode_tokens_per_s * n
    per_gpu_slots = max(1, profile.max_concurrency)
    single = SINGLE_STREAM_FACTOR * profile.decode_tokens_per_s / per_gpu_slots
    rates = ServiceRates(
        prefill_tokens_per_s=profile.prefill_tokens_per_s * n,
        decode_tokens_per_s=decode,
        max_concurrency=concurrency,
        single_stream_tokens_per_s=min(single, decode),
        kv_capacity_tokens=float(KV_TOKENS_PER_SLOT * concurrency),
    )
    if len(_RATES_CACHE) >= 4096:
        _RATES_CACHE.clear()
    _RATES_CACHE[key] = (profile, rates)  # holding the profile keeps its id from being reused
    return rates


KV_FULL = 0.95  # a KV cache this full admits nothing more until a request finishes


class CostTerms(NamedTuple):
    """The parts of a request's expected completion time that depend only on the endpoint."""

    wait_s: float  # before this request's prefill starts
    prefill_s_per_token: float
    decode_s_per_token: float
    utilisation: float  # 0..1: the busiest of GPU, KV cache and slots
    full: bool  # no slot or KV room: ``wait_s`` includes one slot's turnover

    def completion_s(self, prefill_tokens: float, output_tokens: float) -> float:
        """Return the expected time to complete a request of this size here."""
        return (
            self.wait_s
            + prefill_tokens * self.prefill_s_per_token
            + output_tokens * self.decode_s_per_token
        )


def cost_terms(
    rates: ServiceRates,
    running: int,
    waiting: int,
    prefill_tokens: float,
    decode_tokens: float,
    kv_cache_usage: float,
    gpu_util: float,
) -> CostTerms:
    """Compute an endpoint's cost terms from its live load (see the module docstring)."""
    decode_total, single = rates.decode_tokens_per_s, rates.single_stream_tokens_per_s
    share = min(MAX_DECODE_SHARE, running * single / decode_total)  # running x decode_rate / D
    prefill_rate = rates.prefill_tokens_per_s * (1.0 - share)
    wait = prefill_tokens / prefill_rate
    in_flight = running + waiting
    slots = rates.max_concurrency
    full = in_flight >= slots or kv_cache_usage >= KV_FULL
    if full:
        # The batch in flight turns over in decode_tokens / D seconds, so a slot (or its KV
        # room) frees every 1/slots of that; per slot, not per running request, so that more
        # load never makes an endpoint look faster.
        slot_s = decode_tokens / rates.decode_tokens_per_s / slots
        wait += (max(0, in_flight - slots) + 1) * slot_s
    util = max(gpu_util, kv_cache_usage, in_flight / slots)
    return CostTerms(
        wait,
        1.0 / prefill_rate,
        max(1.0 / single, (running + 1) / decode_total),
        min(1.0, util),
        full,
    )


def _size_class(input_tokens: int) -> int:
    """Return a prompt's size class: its power of two (capped, so classes stay bounded)."""
    return min(int(input_tokens).bit_length(), 24)


def _bucket(tokens: float) -> int:
    if tokens < 1.0:
        return 0
    return min(_BUCKETS - 1, 1 + int(math.log(tokens) / _LOG_GROWTH))


def _bucket_value(index: int) -> float:
    """Return the representative token count of a bucket (its geometric middle)."""
    if index == 0:
        return 0.0
    return float(GROWTH ** (index - 0.5))


_VALUES = tuple(_bucket_value(i) for i in range(_BUCKETS))


class _ModelHistogram:
    """One model's decayed histogram and its lazily rebuilt cumulative sums."""

    __slots__ = (
        "counts",
        "cum_count",
        "cum_tokens",
        "observed",
        "since_refresh",
        "total",
        "upper",
    )

    def __init__(self, prior_tokens: float, prior_weight: float) -> None:
        self.counts = [0.0] * _BUCKETS
        self.counts[_bucket(prior_tokens)] = prior_weight
        self.observed = 0
        self.since_refresh = 0
        self.total = prior_weight
        self.cum_count: list[float] = []
        self.cum_tokens: list[float] = []
        self.upper: list[float] = []
        self.refresh()

    def add(self, tokens: float, window: int) -> None:
        self.counts[_bucket(tokens)] += 1.0
        self.total += 1.0
        self.observed += 1
        self.since_refresh += 1
        if self.total >= window:
            self.counts = [c * 0.5 for c in self.counts]
            self.total *= 0.5

    def add_many(self, buckets: dict[int, float], window: int) -> None:
        """Add ``n`` observations per bucket index at once, then halve until under ``window``."""
        added = sum(buckets.values())
        for index, n in buckets.items():
            self.counts[index] += n
        self.total += added
        self.observed += round(added)
        self.since_refresh += round(added)
        factor = 1.0
        while self.total * factor >= window:
            factor *= 0.5
        if factor < 1.0:
            self.counts = [c * factor for c in self.counts]
            self.total *= factor
        self.refresh()  # a batch is rare and may be large: the lazy rule would wait too long

    def stale(self) -> bool:
        return self.since_refresh > 0 and self.since_refresh * 64 >= self.observed

    def refresh(self) -> None:
        """Rebuild cumulative counts and token sums over the non-empty buckets."""
        cum_count: list[float] = []
        cum_tokens: list[float] = []
        upper: list[float] = []
        n = tokens = 0.0
        for i, c in enumerate(self.counts):
            if c > 0.0:
                n += c
                tokens += c * _VALUES[i]
                cum_count.append(n)
                cum_tokens.append(tokens)
                upper.append(_VALUES[i])
        self.cum_count, self.cum_tokens, self.upper = cum_count, cum_tokens, upper
        self.since_refresh = 0

    def capped_mean(self, cap: float) -> float:
        """Return E[min(L, cap)]."""
        total = self.cum_count[-1]
        k = bisect_right(self.upper, cap)  # buckets [0, k) lie at or below the cap
        below_tokens = self.cum_tokens[k - 1] if k else 0.0
        below_count = self.cum_count[k - 1] if k else 0.0
        return (below_tokens + cap * (total - below_count)) / total

    def quantile(self, q: float) -> float:
        target = q * self.cum_count[-1]
        k = bisect_right(self.cum_count, target)
        return self.upper[min(k, len(self.upper) - 1)]


class OutputLengthEstimator:
    """Running distribution of output lengths per model, learned online from completions."""

    def __init__(
        self, prior_tokens: float = 128.0, prior_weight: float = 2.0, window: int = 4096
    ) -> None:
        if prior_tokens < 0 or prior_weight <= 0 or window < 16:
            raise ValueError("prior_tokens >= 0, prior_weight > 0 and window >= 16 required")
        self.prior_tokens = float(prior_tokens)
        self.prior_weight = float(prior_weight)
        self.window = window
        self._models: dict[str, _ModelHistogram] = {}
        self._sizes: dict[tuple[str, int], _ModelHistogram] = {}
        self._groups: OrderedDict[tuple[str, int], list[float]] = OrderedDict()

    def _histogram(self, model: str) -> _ModelHistogram:
        hist = self._models.get(model)
        if hist is None:
            hist = _ModelHistogram(self.prior_tokens, self.prior_weight)
            self._models[model] = hist
        elif hist.stale():
            hist.refresh()
        return hist

    def observe(
        self,
        model: str,
        output_tokens: float,
        *,
        input_tokens: int = 0,
        prefix_hashes: Sequence[int] = (),
    ) -> None:
        """Record the output length of a completed request (and its prompt, when known)."""
        if not output_tokens >= 0 or math.isinf(output_tokens):
            return
        tokens = float(output_tokens)
        hist = self._models.get(model)
        if hist is None:
            hist = self._models[model] = _ModelHistogram(self.prior_tokens, self.prior_weight)
        hist.add(tokens, self.window)
        if input_tokens > 0:
            key = (model, _size_class(input_tokens))
            by_size = self._sizes.get(key)
            if by_size is None:
                by_size = self._sizes[key] = _ModelHistogram(self.prior_tokens, self.prior_weight)
            by_size.add(tokens, self.window)
        if prefix_hashes:
            self._remember(model, prefix_hashes[0], tokens)

    def _remember(self, model: str, first_block: int, tokens: float) -> None:
        groups, key = self._groups, (model, first_block)
        seen = groups.get(key)
        if seen is None:
            groups[key] = [tokens]
            if len(groups) > GROUPS:
                groups.popitem(last=False)
            return
        groups.move_to_end(key)
        seen.append(tokens)
        if len(seen) > GROUP_KEEP:
            del seen[0]

    def group(self, model: str, prefix_hashes: Sequence[int]) -> Sequence[float]:
        """Return the recent output lengths of requests that began with this prompt's prefix."""
        if not prefix_hashes:
            return ()
        return self._groups.get((model, prefix_hashes[0]), ())

    def tail(self, model: str, input_tokens: int, prefix_hashes: Sequence[int] = ()) -> float:
        """Return a long answer for this request: what it may take in the worst usual case.

        The longest recent answer to its prefix when the prefix has two or more; else the
        ``TAIL_Q`` quantile for prompts of its size class, or the model's when that class
        has seen nothing yet.
        """
        seen = self.group(model, prefix_hashes)
        if len(seen) >= 2:
            return max(seen)
        hist = self._sizes.get((model, _size_class(input_tokens)))
        if hist is None or hist.observed == 0:
            hist = self._histogram(model)
        elif hist.stale():
            hist.refresh()
        return hist.quantile(TAIL_Q)

    def observe_histogram(
        self, model: str, le: Sequence[float], cumulative: Sequence[float], count: float
    ) -> None:
        """Record a server's histogram of output lengths (or the change in it) at once.

        ``le`` are the finite upper bounds, ascending; ``cumulative[i]`` the observations at
        or below ``le[i]``; ``count`` all of them (Prometheus' layout). Each bucket's
        observations count at its geometric middle (the first bucket's from 1 token, the
        ``+Inf`` bucket's at the last bound): one addition per bucket, whatever the count.
        """
        buckets: dict[int, float] = {}
        below, lower = 0.0, 1.0
        for bound, cum in zip(le, cumulative, strict=True):
            middle = math.sqrt(lower * bound) if bound > lower else bound
            self._add_bucket(buckets, middle, cum - below)
            below, lower = max(below, cum), bound
        if le:
            self._add_bucket(buckets, lower, count - below)
        if buckets:
            hist = self._models.get(model)
            if hist is None:
                hist = self._models[model] = _ModelHistogram(self.prior_tokens, self.prior_weight)
            hist.add_many(buckets, self.window)

    @staticmethod
    def _add_bucket(buckets: dict[int, float], tokens: float, n: float) -> None:
        if n > 0 and math.isfinite(n) and math.isfinite(tokens):
            index = _bucket(tokens)
            buckets[index] = buckets.get(index, 0.0) + n

    def expected(
        self, model: str, max_output_tokens: int | float = 0, prefix_hashes: Sequence[int] = ()
    ) -> float:
        """Return the expected output length, capped by ``max_output_tokens`` when > 0.

        The median of the recent answers to the request's prefix when it has any, else the
        model's capped mean.
        """
        cap = float(max_output_tokens) if max_output_tokens > 0 else math.inf
        seen = self.group(model, prefix_hashes)
        if seen:
            return min(sorted(seen)[len(seen) // 2], cap)
        hist = self._histogram(model)
        if math.isinf(cap):
            return hist.cum_tokens[-1] / hist.cum_count[-1]
        return hist.capped_mean(cap)

    def quantile(self, model: str, q: float) -> float:
        """Return the ``q`` quantile (0..1) of the model's output length."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be within 0..1")
        return self._histogram(model).quantile(q)

    def count(self, model: str) -> int:
        """Return how many real observations the model has had."""
        hist = self._models.get(model)
        return hist.observed if hist else 0


class LatencyTail:
    """Running quantiles of observed end-to-end latency (a decayed log histogram, in ms)."""

    def __init__(self, window: int = 4096) -> None:
        self.window = window
        self._hist = _ModelHistogram(1000.0, 1.0)

    def observe(self, latency_s: float) -> None:
        if latency_s > 0 and math.isfinite(latency_s):
            self._hist.add(latency_s * 1000.0, self.window)

    @property
    def count(self) -> int:
        return self._hist.observed

    def quantile_s(self, q: float) -> float:
        hist = self._hist
        if hist.stale():
            hist.refresh()
        return hist.quantile(q) / 1000.0
