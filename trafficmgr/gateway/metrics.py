"""The gateway's Prometheus metrics, on a registry of its own.

Counters and histograms are observed on the request path through children cached per label
set (``labels()`` costs more than the observation). Figures the core already keeps (in
flight per endpoint, queue depth per priority, ejections, rejects) are read at scrape time
instead of being mirrored on every request.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from trafficmgr.requestpath import RequestPath
from trafficmgr.routing.types import Priority

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ROUTING_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 0.01, 0.05)


class _CoreCollector(Collector):
    def __init__(self, core: RequestPath) -> None:
        self.core = core

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        in_flight = GaugeMetricFamily(
            "trafficmgr_gateway_in_flight", "Requests in flight per endpoint", labels=["endpoint"]
        )
        for name, count in sorted(self.core.in_flight().items()):
            in_flight.add_metric([name], count)
        yield in_flight
        depth = GaugeMetricFamily(
            "trafficmgr_gateway_queue_depth", "Requests waiting for admission", labels=["priority"]
        )
        for p in Priority:
            depth.add_metric([p.value], self.core.queue.depth(p))
        yield depth
        yield CounterMetricFamily(
            "trafficmgr_gateway_ejections",
            "Endpoints ejected by outlier detection",
            value=self.core.outlier.ejections_total,
        )
        ejected = GaugeMetricFamily(
            "trafficmgr_gateway_ejected", "Endpoints ejected or half-open now", labels=["endpoint"]
        )
        for name in self.core.outlier.ejected_names():
            ejected.add_metric([name], 1)
        yield ejected


class GatewayMetrics:
    """Requests, latencies, retries, rejects and routing time."""

    def __init__(self, core: RequestPath) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "trafficmgr_gateway_requests",
            "Requests answered",
            ["model", "endpoint", "code"],
            registry=r,
        )
        self.ttft = Histogram(
            "trafficmgr_gateway_ttft_seconds",
            "Time to first token (first byte for non-streaming) from the gateway",
            ["model", "endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "trafficmgr_gateway_request_seconds",
            "End-to-end request time at the gateway",
            ["model", "endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.retries = Counter(
            "trafficmgr_gateway_retries",
            "Attempts retried on another endpoint",
            ["reason"],
            registry=r,
        )
        self.rejects = Counter(
            "trafficmgr_gateway_rejects", "Requests refused, by reason", ["reason"], registry=r
        )
        self.routing = Histogram(
            "trafficmgr_gateway_routing_seconds",
            "Time to decide a request's route",
            buckets=ROUTING_BUCKETS,
            registry=r,
        )
        r.register(_CoreCollector(core))
        self._counters: dict[tuple[str, str, str], Counter] = {}
        self._latencies: dict[tuple[str, str], tuple[Histogram, Histogram]] = {}

    def answered(
        self, model: str, endpoint: str, code: int, ttft: float | None, e2e: float
    ) -> None:
        """Count an answered request and observe its latencies."""
        key = (model, endpoint, str(code))
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.requests.labels(*key)
        counter.inc()
        pair = self._latencies.get((model, endpoint))
        if pair is None:
            pair = self._latencies[(model, endpoint)] = (
                self.ttft.labels(model, endpoint),
                self.e2e.labels(model, endpoint),
            )
        if ttft is not None:
            pair[0].observe(ttft)
        pair[1].observe(e2e)

    def rejected(self, reason: str) -> None:
        self.rejects.labels(reason).inc()

    def retried(self, reason: str) -> None:
        self.retries.labels(reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
