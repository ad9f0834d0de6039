"""The ``/metrics`` page under vLLM's names, so the node agent reads a simulated endpoint
exactly as it reads a real one.

Names, types, the ``engine`` and ``model_name`` labels and the histograms' buckets follow vLLM's
v1 engine. One simulated endpoint serves several models on one GPU pool, so each series is
per model: gauges of requests count that model's requests (their sum is the endpoint's), the
KV-cache gauge repeats the endpoint's usage on every model (the agent averages it). Running
and waiting follow the simulator's heartbeats (``trafficmgr.sim.control``): running is the
requests decoding plus the one prefilling, waiting the rest, since the engine's cost model
reads them that way. Times are real seconds: at ``--time-scale X`` the page shows a GPU X
times faster. ``vllm:generation_tokens_total`` includes the tokens of requests still
decoding, so its rate is smooth, as vLLM's (counted per engine step) is.

Counters are plain integers, histograms arrays of bucket counts; the page is rendered on
request (a scrape a second at most, in practice), never kept up to date per token.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def one_two_five(limit: int) -> tuple[float, ...]:
    """Return 1, 2, 5, 10, 20, 50, ... up to ``limit`` (vLLM's token-count buckets)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return tuple(out)
            out.append(float(m * scale))
        scale *= 10


class Histogram:
    """Prometheus histogram: per-bucket counts (``le`` inclusive), their count and sum."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def lines(self, name: str, labels: str) -> Iterable[str]:
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            cumulative += n
            yield f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}.0'
        yield f'{name}_bucket{{{labels},le="+Inf"}} {self.count}.0'
        yield f"{name}_count{{{labels}}} {self.count}.0"
        yield f"{name}_sum{{{labels}}} {self.total!r}"


@dataclass(slots=True)
class ModelStats:
    """What one model on one endpoint has done since the server started."""

    max_model_len: int
    prompt_tokens: int = 0
    generation_tokens: int = 0  # of finished or aborted requests
    cache_queries: int = 0
    cache_hits: int = 0
    finished: Counter[str] = field(default_factory=Counter)
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    prompt_hist: Histogram = field(init=False)
    generation_hist: Histogram = field(init=False)

    def __post_init__(self) -> None:
        buckets = one_two_five(self.max_model_len)
        self.prompt_hist = Histogram(buckets)
        self.generation_hist = Histogram(buckets)

    def prefilled(self, input_tokens: int, cached: int, ttft_s: float) -> None:
        """Count a request whose prefill finished (its first token came out)."""
        self.prompt_tokens += input_tokens
        self.cache_queries += input_tokens
        self.cache_hits += cached
        self.ttft.observe(ttft_s)
        self.prompt_hist.observe(input_tokens)

    def ended(self, output_tokens: int, reason: str, e2e_s: float | None) -> None:
        """Count a request that finished (``stop``/``length``) or was aborted (``abort``)."""
        self.generation_tokens += output_tokens
        self.finished[reason] += 1
        if e2e_s is not None:
            self.e2e.observe(e2e_s)
            self.generation_hist.observe(output_tokens)


@dataclass(frozen=True, slots=True)
class Gauges:
    """One model's live state on an endpoint at scrape time."""

    running: int
    waiting: int
    decoding_tokens: int  # tokens produced so far by its requests in flight


_HELP = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prefix_cache_queries": ("counter", "Prefix cache queries, in queried tokens."),
    "vllm:prefix_cache_hits": ("counter", "Prefix cache hits, in cached tokens."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency."),
    "vllm:request_prompt_tokens": ("histogram", "Number of prefill tokens per request."),
    "vllm:request_generation_tokens": ("histogram", "Number of generation tokens per request."),
}


def _labels(model: str) -> str:
    escaped = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'engine="0",model_name="{escaped}"'


def render(stats: Mapping[str, ModelStats], gauges: Mapping[str, Gauges], kv: float) -> str:
    """Return the exposition text of one endpoint."""
    out: list[str] = []
    labels = {m: _labels(m) for m in stats}

    def family(name: str) -> None:
        kind, text = _HELP[name]
        full = name + "_total" if kind == "counter" else name
        out.append(f"# HELP {full} {text}")
        out.append(f"# TYPE {full} {kind}")

    for name, value in (
        ("vllm:num_requests_running", lambda m: gauges[m].running),
        ("vllm:num_requests_waiting", lambda m: gauges[m].waiting),
        ("vllm:kv_cache_usage_perc", lambda m: kv),
        ("vllm:prefix_cache_queries", lambda m: stats[m].cache_queries),
        ("vllm:prefix_cache_hits", lambda m: stats[m].cache_hits),
        ("vllm:prompt_tokens", lambda m: stats[m].prompt_tokens),
        (
            "vllm:generation_tokens",
            lambda m: stats[m].generation_tokens + gauges[m].decoding_tokens,
        ),
    ):
        family(name)
        suffix = "_total" if _HELP[name][0] == "counter" else ""
        out.extend(f"{name}{suffix}{{{labels[m]}}} {float(value(m))!r}" for m in stats)
    family("vllm:request_success")
    for m, s in stats.items():
        for reason in ("stop", "length", "abort"):
            out.append(
                f'vllm:request_success_total{{{labels[m]},finished_reason="{reason}"}} '
                f"{float(s.finished[reason])!r}"
            )
    for name, attr in (
        ("vllm:time_to_first_token_seconds", "ttft"),
        ("vllm:e2e_request_latency_seconds", "e2e"),
        ("vllm:request_prompt_tokens", "prompt_hist"),
        ("vllm:request_generation_tokens", "generation_hist"),
    ):
        family(name)
        for m, s in stats.items():
            out.extend(getattr(s, attr).lines(name, labels[m]))
    out.append("")
    return "\n".join(out)
