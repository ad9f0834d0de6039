"""Prometheus metrics of the control loop, served at /metrics.

Counts live in the hot state, not in process memory: heartbeats arrive at every web process,
ticks run in whichever worker holds the lock, and a scrape of any one process must see the
whole fleet. So counters go to a Redis hash in the distributed mode (summed in each process
and written every 0.5 s, so the hot paths pay no round trip for them; a dict in the embedded
mode), and gauges are computed at scrape time from the published table, the last evaluation
and the tick's figures. The registry is our own (not the global default), holding
one collector that reads the hot state.

/metrics needs no authentication unless ``settings.TRAFFICMGR["METRICS_TOKEN"]`` is set; then
it wants ``Authorization: Bearer <that token>`` (Prometheus ``authorization`` in the scrape
config).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from regions import conf, hotstate
from trafficmgr.contracts import (
    TICK_DECIDED_AT,
    TICK_LAST_AT,
    TICK_LAST_DURATION,
    counter_field,
    parse_counter_field,
)
from trafficmgr.routing.types import RegionState

TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STATES = tuple(s.value for s in RegionState)

HEARTBEATS = "heartbeats"
DECISIONS = "decisions"
TICKS = "ticks"
TICK_BUCKET = "tick_bucket"
TICK_SUM = "tick_sum"
PUBLISHES = "publishes"
FAIL_STATIC = "fail_static"


def count_ingest(accepted: bool, reason: str) -> None:
    labels = {"result": "accepted" if accepted else "rejected", "reason": reason}
    hotstate.get().incr([(counter_field(HEARTBEATS, labels), 1)])


def count_decision(region: str, endpoint: str, outcome: str) -> None:
    labels = {"region": region, "endpoint": endpoint, "outcome": outcome}
    hotstate.get().incr([(counter_field(DECISIONS, labels), 1)])


def count_publish() -> None:
    hotstate.get().incr([(PUBLISHES, 1)])


def observe_tick(duration_s: float, overran: bool, now: float, held: bool = False) -> None:
    """Record one tick that ran: histogram, overrun count and the last figures (``decided_at``:
    the last tick that judged the fleet rather than holding the last decision)."""
    items = [
        (counter_field(TICK_BUCKET, {"le": repr(b)}), 1.0) for b in TICK_BUCKETS if duration_s <= b
    ]
    items += [(TICK_SUM, duration_s), (counter_field(TICKS, {"result": "ran"}), 1)]
    if overran:
        items.append((counter_field(TICKS, {"result": "overran"}), 1))
    store = hotstate.get()
    store.incr(items)
    info = {TICK_LAST_DURATION: duration_s, TICK_LAST_AT: now}
    if not held:
        info[TICK_DECIDED_AT] = now
    store.set_tick_info(info)


def count_fail_static(what: str) -> None:
    """Count a request served from what was known before because a store was away."""
    try:
        hotstate.get().incr([(counter_field(FAIL_STATIC, {"what": what}), 1)])
    except Exception:  # counting must never fail what it counts
        return


def count_tick_held() -> None:
    hotstate.get().incr([(counter_field(TICKS, {"result": "held"}), 1)])


def count_tick_skipped() -> None:
    hotstate.get().incr([(counter_field(TICKS, {"result": "skipped"}), 1)])


class HotStateCollector:
    """Build every metric family from the hot state at scrape time."""

    def collect(self) -> Iterator[Metric]:
        store = hotstate.get()
        now = time.time()
        yield from _counters(store.counters())
        yield from _tick(store.tick_info(), now)
        table = store.table()
        if table is not None:
            yield from _table(table, now)
        yield from _endpoints(store.evaluation(), now)


def _counters(raw: dict[str, float]) -> Iterator[Metric]:
    ingest = CounterMetricFamily(
        "trafficmgr_heartbeats",
        "Heartbeats received, by result and reason",
        labels=["result", "reason"],
    )
    decisions = CounterMetricFamily(
        "trafficmgr_route_decisions",
        "L7 routing decisions, by region, endpoint and outcome",
        labels=["region", "endpoint", "outcome"],
    )
    ticks = CounterMetricFamily(
        "trafficmgr_ticks",
        "Control-loop ticks: ran, overran (took longer than the interval), skipped (lock held) "
        "or held (the control plane's own impairment: the last decision kept)",
        labels=["result"],
    )
    fail_static = CounterMetricFamily(
        "trafficmgr_fail_static",
        "Requests served from what was known before because a store was unreachable",
        labels=["what"],
    )
    buckets: dict[float, float] = {}
    for field, value in sorted(raw.items()):
        name, labels = parse_counter_field(field)
        if name == HEARTBEATS:
            ingest.add_metric([labels.get("result", ""), labels.get("reason", "")], value)
        elif name == DECISIONS:
            decisions.add_metric(
                [labels.get("region", ""), labels.get("endpoint", ""), labels.get("outcome", "")],
                value,
            )
        elif name == TICKS:
            ticks.add_metric([labels.get("result", "")], value)
        elif name == TICK_BUCKET:
            buckets[float(labels["le"])] = value
        elif name == FAIL_STATIC:
            fail_static.add_metric([labels.get("what", "")], value)
    yield from (ingest, decisions, ticks, fail_static)
    yield CounterMetricFamily(
        "trafficmgr_table_publishes",
        "Routing table versions published",
        value=raw.get(PUBLISHES, 0.0),
    )
    count = raw.get(counter_field(TICKS, {"result": "ran"}), 0.0)
    hist = HistogramMetricFamily(
        "trafficmgr_tick_duration_seconds", "Duration of control-loop ticks"
    )
    hist.add_metric(
        [],
        [(repr(b), buckets.get(b, 0.0)) for b in TICK_BUCKETS] + [("+Inf", count)],
        sum_value=raw.get(TICK_SUM, 0.0),
    )
    yield hist


def _tick(info: dict[str, float], now: float) -> Iterator[Metric]:
    if "last_at" not in info:
        return
    yield GaugeMetricFamily(
        "trafficmgr_tick_last_duration_seconds",
        "Duration of the last tick",
        value=info.get("last_duration_s", 0.0),
    )
    yield GaugeMetricFamily(
        "trafficmgr_tick_last_timestamp_seconds", "When the last tick ran", value=info["last_at"]
    )
    yield GaugeMetricFamily(
        "trafficmgr_tick_age_seconds",
        "Seconds since the last tick ran",
        value=max(0.0, now - info["last_at"]),
    )


def _table(table: Any, now: float) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "trafficmgr_table_version_info", "The published table's version", labels=["version"]
    )
    info.add_metric([table.version], 1.0)
    yield info
    yield GaugeMetricFamily(
        "trafficmgr_table_generated_timestamp_seconds",
        "When the published table was compiled",
        value=table.generated_at,
    )
    yield GaugeMetricFamily(
        "trafficmgr_table_age_seconds",
        "Seconds since the published table changed",
        value=max(0.0, now - table.generated_at),
    )
    state = GaugeMetricFamily(
        "trafficmgr_region_state", "1 for the region's current state", labels=["region", "state"]
    )
    headroom = GaugeMetricFamily(
        "trafficmgr_region_headroom",
        "Free share of a region's live capacity, 0..1",
        labels=["region"],
    )
    capacity = GaugeMetricFamily(
        "trafficmgr_region_capacity_tokens_per_second",
        "Live decode capacity of a region",
        labels=["region"],
    )
    ramp = GaugeMetricFamily("trafficmgr_region_ramp", "Slow-start share 0..1", labels=["region"])
    for name, status in sorted(table.regions.items()):
        for s in STATES:
            state.add_metric([name, s], 1.0 if status.state.value == s else 0.0)
        headroom.add_metric([name], status.headroom)
        capacity.add_metric([name], status.capacity)
        ramp.add_metric([name], status.ramp)
    yield from (state, headroom, capacity, ramp)
    weights = GaugeMetricFamily(
        "trafficmgr_route_weight",
        "Weight of a region in a zone's list for a model",
        labels=["zone", "model", "region"],
    )
    for zone, lists in sorted(table.zones.items()):
        for model, entries in sorted(lists.items()):
            for w in entries:
                weights.add_metric([zone, model, w.region], w.weight)
    yield weights


def _endpoints(evaluation: dict[str, Any], now: float) -> Iterator[Metric]:
    healthy = GaugeMetricFamily(
        "trafficmgr_endpoint_healthy",
        "1 when the endpoint may take traffic",
        labels=["region", "endpoint"],
    )
    load = GaugeMetricFamily(
        "trafficmgr_endpoint_load", "Utilisation estimate 0..1", labels=["region", "endpoint"]
    )
    score = GaugeMetricFamily(
        "trafficmgr_endpoint_score", "Health score 0..1", labels=["region", "endpoint"]
    )
    lag = GaugeMetricFamily(
        "trafficmgr_heartbeat_lag_seconds",
        "Seconds since the endpoint's last accepted heartbeat",
        labels=["region", "endpoint"],
    )
    transit = GaugeMetricFamily(
        "trafficmgr_heartbeat_transit_seconds",
        "received_at - sent_at of the last heartbeat (transit plus clock skew)",
        labels=["region", "endpoint"],
    )
    for name, e in sorted(evaluation.get("endpoints", {}).items()):
        labels = [e["region"], name]
        healthy.add_metric(labels, 1.0 if e["healthy"] else 0.0)
        load.add_metric(labels, e["load"])
        score.add_metric(labels, e["score"])
        if e.get("received_at") is not None:
            lag.add_metric(labels, max(0.0, now - e["received_at"]))
            transit.add_metric(labels, e["received_at"] - e["sent_at"])
    yield from (healthy, load, score, lag, transit)


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(HotStateCollector())


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the Prometheus text format (bearer token optional, see the module docstring)."""
    wanted = conf.metrics_token()
    if wanted:
        given = request.META.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {wanted}".encode()):
            response = HttpResponse(
                "metrics need a bearer token\n", status=401, content_type="text/plain"
            )
            response["WWW-Authenticate"] = "Bearer"
            return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
