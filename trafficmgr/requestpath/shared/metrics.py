"""The shared state's figures in Prometheus form, for the gateway's and the picker's /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def shared_families(
    status: dict[str, Any] | None, prefix: str
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Yield ``<prefix>_shared_state_*`` from ``SharedState.status()`` (None: not shared)."""
    enabled = status is not None
    yield GaugeMetricFamily(
        f"{prefix}_shared_state_enabled",
        "1 when this process shares its request-path state through Redis",
        value=1 if enabled else 0,
    )
    if status is None:
        return
    yield GaugeMetricFamily(
        f"{prefix}_shared_state_connected", "1 while Redis answers", value=int(status["connected"])
    )
    yield GaugeMetricFamily(
        f"{prefix}_shared_state_local_only",
        "1 while decisions use this process's own view alone (the others' figures are stale)",
        value=int(status["mode"] == "local"),
    )
    yield GaugeMetricFamily(
        f"{prefix}_shared_state_peers", "Other processes merged last", value=status["peers"]
    )
    staleness = status["staleness_s"]
    yield GaugeMetricFamily(
        f"{prefix}_shared_state_staleness_seconds",
        "Age of the oldest figures in the merged view (bound: the staleness setting)",
        value=-1.0 if staleness is None else staleness,
    )
    yield CounterMetricFamily(
        f"{prefix}_shared_state_local_decisions",
        "Decisions made from this process's own view because the shared state was out of reach",
        value=status["local_decisions"],
    )
    errors = CounterMetricFamily(
        f"{prefix}_shared_state_errors", "Failed exchanges with Redis", labels=["reason"]
    )
    for reason, n in sorted(status["errors"].items()):
        errors.add_metric([reason], n)
    yield errors
    ignored = CounterMetricFamily(
        f"{prefix}_shared_state_ignored",
        "Shared values left out of the merge (stale, clock_skew, corrupt, foreign, ...)",
        labels=["reason"],
    )
    for reason, n in sorted(status["ignored"].items()):
        ignored.add_metric([reason], n)
    yield ignored
