"""The shared state beside a front's upkeep: started after the first read, and its /metrics."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from trafficmgr.requestpath.core import RequestPath
from trafficmgr.requestpath.shared import start_sharing
from trafficmgr.requestpath.shared.config import Sharing
from trafficmgr.requestpath.shared.metrics import shared_families


class SharedUpkeep:
    """Read the control plane (``core.maintain``); after the first read, start sharing: one
    merge before the front reports ready, so a new replica decides warm."""

    def __init__(self, core: RequestPath) -> None:
        self.core = core
        self.sharing: Sharing | None = None
        self._started = False

    def __call__(self) -> None:
        self.core.maintain()
        if not self._started:
            self._started = True
            self.sharing = start_sharing(self.core)

    def stop(self) -> None:
        """Withdraw this process's part of the shared state."""
        if self.sharing is not None:
            self.sharing.stop()


class _Figures(Collector):
    def __init__(self, core: RequestPath, prefix: str) -> None:
        self.core, self.prefix = core, prefix

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        in_flight = GaugeMetricFamily(
            f"{self.prefix}_in_flight", "Requests in flight per endpoint", labels=["endpoint"]
        )
        for name, count in sorted(self.core.in_flight().items()):
            in_flight.add_metric([name], count)
        yield in_flight
        sharing = self.core.sharing
        yield from shared_families(sharing.status() if sharing is not None else None, self.prefix)


def serve_metrics(core: RequestPath, listen: str, prefix: str) -> None:
    """Serve ``core``'s figures as Prometheus text on ``listen`` (``HOST:PORT``) from a thread."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--metrics-listen: expected HOST:PORT, got {listen!r}")
    registry = CollectorRegistry()
    registry.register(_Figures(core, prefix))
    start_http_server(int(port), host.strip("[]") or "127.0.0.1", registry)
