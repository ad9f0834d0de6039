"""The gateway's Prometheus metrics, on a registry of its own.

The figures every request touches (answers per model, endpoint and code; TTFT, end-to-end
and routing time) are plain counts kept by the event loop that serves the requests, and
turned into Prometheus families when scraped (``_Answers``): a ``prometheus_client``
histogram takes a lock per bucket and per sum, several microseconds a request, while a
count here is a list increment. The scrape runs on the same loop, so no lock is needed.
The text is the same as the library's (``_total``, ``_bucket``/``_count``/``_sum``,
``_created``). Rarer figures (retries, rejects) stay library counters; figures the core
already keeps (in flight per endpoint, queue depth per priority, ejections) are read at
scrape time instead of being mirrored on every request.

With several worker processes on one port (``--workers N``) a scrape reaches whichever
worker the kernel hands the connection to, so every worker answers for all of them
(``WorkerShare``): each writes its figures to a directory the workers share, every
``SHARE_S`` and when it stops, and a scrape adds the others' latest to its own live ones.
Counters and histograms are summed (a stopped worker's stay counted, so no counter goes
back); of gauges, a stopped worker's are dropped and the rest summed, except
``trafficmgr_gateway_ejected`` (1 while any worker has the endpoint ejected). The others'
figures are at most ``SHARE_S`` old; ``trafficmgr_gateway_workers`` says how many workers
are running.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from trafficmgr.requestpath import RequestPath
from trafficmgr.requestpath.shared.metrics import shared_families
from trafficmgr.routing.types import Priority
from trafficmgr.runtime.procs import pid_alive

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ROUTING_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 0.01, 0.05)
SHARE_S = 1.0  # how often a worker writes its figures for the other workers' scrapes
EITHER_GAUGES = frozenset({"trafficmgr_gateway_ejected"})  # 1 when any worker says 1

log = logging.getLogger("trafficmgr.gateway")


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
        sharing = self.core.sharing
        yield from shared_families(
            sharing.status() if sharing is not None else None, "trafficmgr_gateway"
        )


class Histo:
    """One label set's histogram: counts per bucket (not cumulative), sum, creation time."""

    __slots__ = ("bounds", "counts", "created", "les", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.les = [floatToGoString(b) for b in (*bounds, float("inf"))]  # type: ignore[no-untyped-call]
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def add_to(self, family: HistogramMetricFamily, names: list[str], labels: list[str]) -> None:
        buckets, running = [], 0
        for le, count in zip(self.les, self.counts, strict=True):
            running += count
            buckets.append((le, float(running)))
        family.add_metric(labels, buckets, self.total)
        family.add_sample(
            family.name + "_created", dict(zip(names, labels, strict=True)), self.created
        )


class _Answers(Collector):
    """Answers, TTFT, end-to-end and routing time, kept as plain counts (module doc)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], list[float]] = {}  # key -> [count, created]
        self.latencies: dict[tuple[str, str], tuple[Histo, Histo]] = {}
        self.routing = Histo(ROUTING_BUCKETS)

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily(
            "trafficmgr_gateway_requests", "Requests answered", labels=["model", "endpoint", "code"]
        )
        for key, (count, created) in sorted(self.counts.items()):
            requests.add_metric(list(key), count, created=created)
        yield requests
        ttft = HistogramMetricFamily(
            "trafficmgr_gateway_ttft_seconds",
            "Time to first token (first byte for non-streaming) from the gateway",
            labels=["model", "endpoint"],
        )
        e2e = HistogramMetricFamily(
            "trafficmgr_gateway_request_seconds",
            "End-to-end request time at the gateway",
            labels=["model", "endpoint"],
        )
        for pair, (first, whole) in sorted(self.latencies.items()):
            first.add_to(ttft, ["model", "endpoint"], list(pair))
            whole.add_to(e2e, ["model", "endpoint"], list(pair))
        yield ttft
        yield e2e
        routing = HistogramMetricFamily(
            "trafficmgr_gateway_routing_seconds", "Time to decide a request's route"
        )
        self.routing.add_to(routing, [], [])
        yield routing


class GatewayMetrics:
    """Requests, latencies, retries, rejects and routing time."""

    def __init__(self, core: RequestPath, share: WorkerShare | None = None) -> None:
        self.share = share
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._answers = _Answers()
        r.register(self._answers)
        self.retries = Counter(
            "trafficmgr_gateway_retries",
            "Attempts retried on another endpoint",
            ["reason"],
            registry=r,
        )
        self.rejects = Counter(
            "trafficmgr_gateway_rejects", "Requests refused, by reason", ["reason"], registry=r
        )
        r.register(_CoreCollector(core))
        self._counts = self._answers.counts
        self._latencies = self._answers.latencies
        self.routing = self._answers.routing

    def answered(
        self, model: str, endpoint: str, code: int, ttft: float | None, e2e: float
    ) -> None:
        """Count an answered request and observe its latencies."""
        key = (model, endpoint, str(code))
        counted = self._counts.get(key)
        if counted is None:
            counted = self._counts[key] = [0.0, time.time()]
        counted[0] += 1
        pair = self._latencies.get((model, endpoint))
        if pair is None:
            pair = self._latencies[(model, endpoint)] = (
                Histo(LATENCY_BUCKETS),
                Histo(LATENCY_BUCKETS),
            )
        if ttft is not None:
            pair[0].observe(ttft)
        pair[1].observe(e2e)

    def rejected(self, reason: str) -> None:
        self.rejects.labels(reason).inc()

    def retried(self, reason: str) -> None:
        self.retries.labels(reason).inc()

    def render(self) -> bytes:
        """Return the Prometheus text: this process's figures, plus the other workers'."""
        if self.share is None:
            return generate_latest(self.registry)
        own = list(self.registry.collect())
        running, stopped = self.share.peers()
        return generate_latest(_Merged(pooled(own, running, stopped)))

    def publish(self) -> None:
        """Write this process's figures for the other workers (with several of them)."""
        if self.share is not None:
            self.share.publish(self.registry.collect())


# One family as a worker writes it: [name, type, help, [[sample, {label: value}, value], ...]]
Family = list[object]


class WorkerShare:
    """The figures of one gateway's workers, pooled through a directory they all know: a
    worker writes ``<pid>.json`` there (whole, by rename) and reads the others'."""

    def __init__(self, directory: str | os.PathLike[str], pid: int | None = None) -> None:
        self.directory = Path(directory)
        self.pid = os.getpid() if pid is None else pid

    def publish(self, families: Iterable[Metric]) -> None:
        doc = {
            "pid": self.pid,
            "families": [
                [f.name, f.type, f.documentation, [[s.name, s.labels, s.value] for s in f.samples]]
                for f in families
            ],
        }
        path = self.directory / f"{self.pid}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)
        except OSError:  # the scrape of another worker then shows this one's older figures
            log.warning("could not write this worker's metrics to %s", path, exc_info=True)

    def peers(self) -> tuple[list[list[Family]], list[list[Family]]]:
        """Return the other workers' latest figures: (running ones, stopped ones)."""
        running: list[list[Family]] = []
        stopped: list[list[Family]] = []
        try:
            paths = sorted(self.directory.glob("*.json"))
        except OSError:
            return running, stopped
        for path in paths:
            if path.stem == str(self.pid):
                continue
            try:
                doc = json.loads(path.read_text())
                families, pid = doc["families"], int(doc["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being replaced or unreadable: skipped for this scrape
            (running if pid_alive(pid) else stopped).append(families)
        return running, stopped


def pooled(
    own: Sequence[Metric], running: Sequence[list[Family]], stopped: Sequence[list[Family]]
) -> list[Metric]:
    """Return one worker's families with the others' added (rules in the module doc)."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}

    def add(name: str, typ: str, doc: str, samples: Iterable[Sequence[object]]) -> None:
        family = merged.get(name)
        if family is None:
            family = merged[name] = Metric(name, doc, typ)
            values[name] = {}
        table = values[name]
        for sample_name, labels, value in samples:
            key = (str(sample_name), tuple(sorted(dict(labels).items())))  # type: ignore[call-overload]
            v = float(value)  # type: ignore[arg-type]
            old = table.get(key)
            if old is None:
                table[key] = v
            elif key[0].endswith("_created"):
                table[key] = min(old, v)
            elif typ == "gauge" and name in EITHER_GAUGES:
                table[key] = max(old, v)
            else:
                table[key] = old + v

    for f in own:
        add(f.name, f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
    for families, alive in [(fs, True) for fs in running] + [(fs, False) for fs in stopped]:
        for name, typ, doc, samples in families:
            if typ == "gauge" and not alive:
                continue  # a stopped worker holds nothing in flight, queued or ejected now
            add(str(name), str(typ), str(doc), samples)  # type: ignore[arg-type]
    workers = Metric("trafficmgr_gateway_workers", "Gateway worker processes running", "gauge")
    workers.add_sample("trafficmgr_gateway_workers", {}, float(1 + len(running)))
    out = [workers]
    for name, family in merged.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
        out.append(family)
    return out


class _Merged:
    """A registry stand-in for ``generate_latest``: the pooled families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families
