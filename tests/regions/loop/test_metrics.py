"""/metrics: the Prometheus text of the whole fleet, built from the hot state."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import RequestFactory
from prometheus_client.parser import text_string_to_metric_families

from tests.regions.loop.conftest import API, US_IP

pytestmark = pytest.mark.django_db


def scrape(**headers: str) -> Any:
    from regions.metrics import metrics_view

    return metrics_view(RequestFactory().get("/metrics", **headers))


def samples(response: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def run_loop_once(feed: Any, viewer_client: Any) -> None:
    """Heartbeats from every endpoint, one tick and one decision: every series has a value."""
    from regions.loop.control import run_tick

    now = time.time()
    feed(now)
    run_tick(now)
    viewer_client.generic(
        "POST",
        f"{API}/route",
        json.dumps(
            {"model": "llama-3-8b", "client_ip": US_IP, "input_tokens": 10, "max_output_tokens": 10}
        ).encode(),
        content_type="application/json",
    )


def test_figures_after_heartbeats_a_tick_and_a_decision(
    feed: Any, viewer_client: Any, fresh_hot_state: Any
) -> None:
    run_loop_once(feed, viewer_client)
    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    got = samples(response)
    assert got[("trafficmgr_heartbeats_total", (("reason", "ok"), ("result", "accepted")))] == 5
    assert got[("trafficmgr_region_state", (("region", "eu-west"), ("state", "healthy")))] == 1
    assert got[("trafficmgr_region_state", (("region", "eu-west"), ("state", "down")))] == 0
    assert 0 <= got[("trafficmgr_region_headroom", (("region", "us-east"),))] <= 1
    assert got[("trafficmgr_tick_duration_seconds_count", ())] == 1
    assert got[("trafficmgr_ticks_total", (("result", "ran"),))] == 1
    assert got[("trafficmgr_table_publishes_total", ())] == 1
    version = fresh_hot_state.table_version()
    assert got[("trafficmgr_table_version_info", (("version", version),))] == 1
    assert any(
        name == "trafficmgr_route_weight" and dict(labels)["zone"] == "GB" for name, labels in got
    )
    assert (
        got[
            (
                "trafficmgr_route_decisions_total",
                (("endpoint", "use-1"), ("outcome", "weighted"), ("region", "us-east")),
            )
        ]
        == 1
    )
    lag = got[("trafficmgr_heartbeat_lag_seconds", (("endpoint", "euw-1"), ("region", "eu-west")))]
    assert 0 <= lag < 60
    assert got[("trafficmgr_endpoint_healthy", (("endpoint", "euw-1"), ("region", "eu-west")))] == 1


def test_an_empty_control_plane_still_answers(db: None) -> None:
    got = samples(scrape())
    assert got[("trafficmgr_tick_duration_seconds_count", ())] == 0


def test_an_optional_bearer_token(settings: Any, db: None) -> None:
    settings.TRAFFICMGR = {**settings.TRAFFICMGR, "METRICS_TOKEN": "s3cret"}
    assert scrape().status_code == 401
    assert scrape(HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert scrape(HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_every_control_plane_series_the_shipped_dashboard_plots_is_exported(
    feed: Any, viewer_client: Any, fresh_hot_state: Any
) -> None:
    """deploy/grafana-dashboard.json plots only series /metrics carries once the loop ran."""
    run_loop_once(feed, viewer_client)
    root = Path(__file__).resolve().parents[3]
    dashboard = json.loads((root / "deploy" / "grafana-dashboard.json").read_text())
    wanted = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"trafficmgr_(?!dns_|gateway_)[a-z0-9_]+", target["expr"])
    }
    names = {name for name, _ in samples(scrape())}
    assert wanted, "the dashboard plots no control-plane series"
    assert not wanted - names, f"plotted but not exported: {sorted(wanted - names)}"
