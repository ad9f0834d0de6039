"""Inference-server metrics: Prometheus text from vLLM, TGI or Triton turned into one reading."""

from __future__ import annotations

import math
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from agents.heartbeat import ONE_MODEL, OutputLengths, ServerReading

Sample = tuple[Mapping[str, str], float]
MAX_METRICS_BYTES = 16 * 1024 * 1024
KINDS = ("vllm", "tgi", "triton")


@dataclass(frozen=True, slots=True)
class Exposition:
    """Samples of one scrape by sample name (``x_total``, ``x_bucket``, ...), garbage counted."""

    samples: Mapping[str, tuple[Sample, ...]]  # keyed by canonical name (see canonical())
    garbage_lines: int = 0

    def series(self, name: str) -> tuple[Sample, ...]:
        return self.samples.get(canonical(name), ())

    def has(self, name: str) -> bool:
        return canonical(name) in self.samples

    def _values(self, name: str, match: Mapping[str, str]) -> list[float]:
        return [
            value
            for labels, value in self.series(name)
            if math.isfinite(value) and all(labels.get(k) == v for k, v in match.items())
        ]

    def total(self, name: str, **match: str) -> float | None:
        """Sum over the label sets that match; None when the metric is absent."""
        values = self._values(name, match)
        return sum(values) if values else None

    def mean(self, name: str, **match: str) -> float | None:
        values = self._values(name, match)
        return sum(values) / len(values) if values else None

    def label_values(self, name: str, label: str) -> tuple[str, ...]:
        seen = {labels[label] for labels, _ in self.series(name) if label in labels}
        return tuple(sorted(seen))

    def any_prefixed(self, prefix: str) -> bool:
        return any(name.startswith(prefix) for name in self.samples)


def canonical(name: str) -> str:
    """Drop a ``_total`` suffix: the parser adds it to counters only when a TYPE line says so."""
    return name[: -len("_total")] if name.endswith("_total") else name


def _gather(families: Iterable[object], into: dict[str, list[Sample]]) -> None:
    for family in families:
        for sample in getattr(family, "samples", ()):
            key = canonical(sample.name)
            into.setdefault(key, []).append((dict(sample.labels), float(sample.value)))


def parse_exposition(text: str) -> Exposition:
    """Parse Prometheus text; a line the parser rejects is skipped and counted, never fatal."""
    samples: dict[str, list[Sample]] = {}
    try:
        _gather(text_string_to_metric_families(text), samples)
        return Exposition({k: tuple(v) for k, v in samples.items()})
    except Exception:  # the parser raises assorted errors on bad input
        samples.clear()
    garbage = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # HELP/TYPE are not needed: samples are used by their own names
        try:
            _gather(list(text_string_to_metric_families(stripped + "\n")), samples)
        except Exception:
            garbage += 1
    return Exposition({k: tuple(v) for k, v in samples.items()}, garbage)


@dataclass(frozen=True, slots=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending
    count: float
    total: float

    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


def histogram(x: Exposition, base: str, **match: str) -> Histogram | None:
    """Sum a histogram over the label sets that match (``le`` aside)."""
    by_le: dict[float, float] = {}
    for labels, value in x.series(base + "_bucket"):
        if "le" not in labels or not all(labels.get(k) == v for k, v in match.items()):
            continue
        try:
            le = float(labels["le"])
        except ValueError:
            continue
        by_le[le] = by_le.get(le, 0.0) + value
    if not by_le:
        return None
    buckets = tuple(sorted(by_le.items()))
    count = x.total(base + "_count", **match)
    return Histogram(
        buckets,
        count if count is not None else buckets[-1][1],
        x.total(base + "_sum", **match) or 0.0,
    )


def output_lengths(
    x: Exposition, base: str, label: str | None
) -> tuple[tuple[str, OutputLengths], ...]:
    """Per model (by ``label``; ONE_MODEL without), the histogram of generated tokens per
    request as the server exposes it, cumulative since it started; models without one left out.
    """
    models = x.label_values(base + "_bucket", label) if label is not None else (ONE_MODEL,)
    out: list[tuple[str, OutputLengths]] = []
    for model in models:
        h = histogram(x, base, **({label: model} if label is not None else {}))
        if h is None or not math.isfinite(h.count) or h.count <= 0:
            continue
        finite = [(b, c) for b, c in h.buckets if math.isfinite(b)]
        if not all(math.isfinite(c) for _, c in finite):
            continue
        le = tuple(b for b, _ in finite)
        out.append((model, OutputLengths(le, tuple(round(c) for _, c in finite), round(h.count))))
    return tuple(out)


def histogram_delta(cur: Histogram, prev: Histogram | None) -> Histogram:
    """Observations between two scrapes; the current totals after a reset or a layout change."""
    if prev is None or cur.count < prev.count:
        return cur
    if [b for b, _ in cur.buckets] != [b for b, _ in prev.buckets]:
        return cur
    buckets = tuple((b, c - p) for (b, c), (_, p) in zip(cur.buckets, prev.buckets, strict=True))
    return Histogram(buckets, cur.count - prev.count, cur.total - prev.total)


def quantile(h: Histogram, q: float) -> float | None:
    """Estimate a quantile like PromQL's histogram_quantile (linear inside a bucket)."""
    if not h.buckets or h.buckets[-1][1] <= 0:
        return None
    rank = q * h.buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, cumulative in h.buckets:
        if cumulative >= rank:
            if math.isinf(upper):
                return lower  # the highest finite bound, as Prometheus does
            if cumulative == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        lower, below = upper, cumulative
    return lower


@dataclass(slots=True)
class History:
    """Earlier scrapes, for counter rates (vs. the previous scrape) and windowed histograms."""

    window_s: float = 60.0
    max_entries: int = 120
    _last: dict[str, tuple[float, float]] = field(default_factory=dict)
    _hists: dict[str, deque[tuple[float, Histogram]]] = field(default_factory=dict)

    def rate(self, key: str, value: float | None, now: float) -> float | None:
        """Per-second increase since the previous scrape; None first time and after a reset."""
        if value is None:
            self._last.pop(key, None)
            return None
        prev = self._last.get(key)
        self._last[key] = (now, value)
        if prev is None or value < prev[1] or now <= prev[0]:
            return None
        return (value - prev[1]) / (now - prev[0])

    def windowed(self, key: str, h: Histogram | None, now: float) -> Histogram | None:
        """Observations of the last ``window_s``; all-time ones when the window saw none."""
        if h is None:
            self._hists.pop(key, None)
            return None
        entries = self._hists.setdefault(key, deque(maxlen=self.max_entries))
        while len(entries) > 1 and entries[1][0] <= now - self.window_s:
            entries.popleft()
        base = entries[0][1] if entries else None
        entries.append((now, h))
        delta = histogram_delta(h, base)
        return delta if delta.count > 0 else h


def _ms(value: float | None, scale: float) -> float | None:
    return value * scale if value is not None else None


def _quantiles_ms(h: Histogram | None, scale: float) -> tuple[float | None, float | None]:
    if h is None:
        return None, None
    return _ms(quantile(h, 0.5), scale), _ms(quantile(h, 0.99), scale)


def _int(value: float | None) -> int | None:
    return round(value) if value is not None else None


def extract_vllm(
    x: Exposition, h: History, now: float, facts: Mapping[str, float]
) -> ServerReading:
    """vLLM (v0 and v1 engines): KV usage under either of its names."""
    kv = x.mean("vllm:kv_cache_usage_perc")
    if kv is None:
        kv = x.mean("vllm:gpu_cache_usage_perc")
    ttft = h.windowed("ttft", histogram(x, "vllm:time_to_first_token_seconds"), now)
    p50, p99 = _quantiles_ms(ttft, 1000.0)
    models = x.label_values("vllm:num_requests_running", "model_name")
    return ServerReading(
        kind="vllm",
        requests_running=_int(x.total("vllm:num_requests_running")),
        requests_waiting=_int(x.total("vllm:num_requests_waiting")),
        kv_cache_usage=kv,
        tokens_per_s=h.rate("generated", x.total("vllm:generation_tokens_total"), now),
        ttft_p50_ms=p50,
        ttft_p99_ms=p99,
        models_loaded=models,
        output_tokens=output_lengths(x, "vllm:request_generation_tokens", "model_name"),
    )


def extract_tgi(x: Exposition, h: History, now: float, facts: Mapping[str, float]) -> ServerReading:
    """TGI: TTFT estimated as queue time plus the mean prefill forward pass."""
    queue = h.windowed("queue", histogram(x, "tgi_request_queue_duration"), now)
    prefill = h.windowed(
        "prefill", histogram(x, "tgi_batch_forward_duration", method="prefill"), now
    )
    prefill_s = prefill.mean() if prefill is not None else None
    q50, q99 = (quantile(queue, 0.5), quantile(queue, 0.99)) if queue else (None, None)
    p50 = p99 = None
    if q50 is not None or prefill_s is not None:
        p50 = ((q50 or 0.0) + (prefill_s or 0.0)) * 1000
        p99 = ((q99 or 0.0) + (prefill_s or 0.0)) * 1000
    kv = None
    max_tokens = facts.get("max_batch_total_tokens")
    current = x.total("tgi_batch_current_max_tokens")
    if max_tokens and current is not None:
        kv = min(1.0, current / max_tokens)
    return ServerReading(
        kind="tgi",
        requests_running=_int(x.total("tgi_batch_current_size")),
        requests_waiting=_int(x.total("tgi_queue_size")),
        kv_cache_usage=kv,
        tokens_per_s=h.rate("generated", x.total("tgi_request_generated_tokens_sum"), now),
        ttft_p50_ms=p50,
        ttft_p99_ms=p99,
        output_tokens=output_lengths(x, "tgi_request_generated_tokens", None),  # its one model
    )


def _triton_kv(x: Exposition) -> float | None:
    blocks = "nv_trt_llm_kv_cache_block_metrics"
    fraction = x.mean(blocks, kv_cache_block_type="fraction")
    if fraction is not None:
        return fraction
    used, most = (
        x.total(blocks, kv_cache_block_type="used"),
        x.total(blocks, kv_cache_block_type="max"),
    )
    if used is not None and most:
        return used / most
    return x.mean("vllm:kv_cache_usage_perc") or x.mean("vllm:gpu_cache_usage_perc")


def extract_triton(
    x: Exposition, h: History, now: float, facts: Mapping[str, float]
) -> ServerReading:
    """Triton: in-flight requests from TRT-LLM when exported, else Little's law on compute time."""
    active = x.total("nv_trt_llm_request_metrics", request_type="active")
    busy_us = h.rate("compute_us", x.total("nv_inference_compute_infer_duration_us"), now)
    running = active if active is not None else (busy_us / 1e6 if busy_us is not None else None)
    first = h.windowed("first", histogram(x, "nv_inference_first_response_histogram_ms"), now)
    p50, p99 = _quantiles_ms(first, 1.0)
    per_s = h.rate("success", x.total("nv_inference_request_success"), now)
    duration_us = h.rate("duration_us", x.total("nv_inference_request_duration_us"), now)
    if p50 is None and per_s and duration_us is not None:
        p50 = duration_us / per_s / 1000  # mean request time: the first response of a
        # non-decoupled model is its whole response
    tokens = h.rate("generated", x.total("vllm:generation_tokens_total"), now)
    return ServerReading(
        kind="triton",
        requests_running=_int(running),
        requests_waiting=_int(x.total("nv_inference_pending_request_count")),
        kv_cache_usage=_triton_kv(x),
        tokens_per_s=tokens,
        ttft_p50_ms=p50,
        ttft_p99_ms=p99,
        models_loaded=x.label_values("nv_inference_request_success", "model"),
    )


Extractor = Callable[[Exposition, History, float, Mapping[str, float]], ServerReading]
EXTRACTORS: dict[str, Extractor] = {
    "vllm": extract_vllm,
    "tgi": extract_tgi,
    "triton": extract_triton,
}


def detect_kind(x: Exposition) -> str:
    """Tell the server from its metric names (Triton first: its vLLM backend exports both)."""
    if x.any_prefixed("nv_inference_"):
        return "triton"
    if x.any_prefixed("vllm:"):
        return "vllm"
    if x.any_prefixed("tgi_"):
        return "tgi"
    return "unknown"


def fetch_text(
    url: str, timeout: float, opener: urllib.request.OpenerDirector | None = None
) -> str:
    """GET a /metrics page (bounded in size and time)."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    open_ = opener.open if opener is not None else urllib.request.urlopen
    with open_(request, timeout=timeout) as response:
        body: bytes = response.read(MAX_METRICS_BYTES + 1)
    if len(body) > MAX_METRICS_BYTES:
        raise ValueError(f"metrics page larger than {MAX_METRICS_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


class ServerMetrics:
    """Scrape the server each tick and keep what rates and windows need."""

    def __init__(
        self,
        fetch: Callable[[], str],
        kind: str = "auto",
        *,
        label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 60.0,
    ) -> None:
        if kind != "auto" and kind not in EXTRACTORS:
            raise ValueError(f"unknown server kind {kind!r}; expected auto or one of {KINDS}")
        self._fetch = fetch
        self._configured = kind
        self.kind = kind if kind != "auto" else "unknown"
        self._label = label
        self._clock = clock
        self._history = History(window_s=window_s)

    def collect(self, facts: Mapping[str, float] | None = None) -> ServerReading:
        """One scrape; a failed scrape gives a reading with ``scrape_ok`` False, never raises."""
        label = self._label or self.kind
        try:
            text = self._fetch()
        except Exception as exc:  # any failure is reported, not raised
            return ServerReading(kind=label, scrape_ok=False, error=f"{type(exc).__name__}: {exc}")
        x = parse_exposition(text)
        kind = self._configured if self._configured != "auto" else detect_kind(x)
        if kind != self.kind:
            self._history = History(window_s=self._history.window_s)
            self.kind = kind
        extractor = EXTRACTORS.get(kind)
        if extractor is None:
            return ServerReading(
                kind=self._label or kind,
                garbage_lines=x.garbage_lines,
                error="no vLLM, TGI or Triton metrics found",
            )
        reading = extractor(x, self._history, self._clock(), facts or {})
        return replace(reading, kind=self._label or reading.kind, garbage_lines=x.garbage_lines)
