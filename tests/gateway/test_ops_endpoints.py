"""``/metrics`` and ``/healthz``'s detail take a bearer token when one is set (as the control
plane's ``/metrics``); liveness stays open to probes that carry none."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2 as httpx
import pytest

from tests.gateway.world import GatewayThread, make_core
from trafficmgr.gateway import GatewaySettings
from trafficmgr.routing.types import Fleet

SECRET = "scrape-secret"


@pytest.fixture
def guarded(fleet: Fleet) -> Iterator[httpx.Client]:
    core, _ = make_core(fleet)
    with (
        GatewayThread(core, GatewaySettings(metrics_token=SECRET)) as gw,
        httpx.Client(base_url=gw.origin, timeout=20) as http,
    ):
        yield http


@pytest.fixture
def open_gateway(fleet: Fleet) -> Iterator[httpx.Client]:
    core, _ = make_core(fleet)
    with GatewayThread(core) as gw, httpx.Client(base_url=gw.origin, timeout=20) as http:
        yield http


def test_metrics_want_the_token_when_one_is_set(guarded: httpx.Client) -> None:
    refused = guarded.get("/metrics")
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    assert b"trafficmgr" not in refused.content
    assert guarded.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    scraped = guarded.get("/metrics", headers={"Authorization": f"Bearer {SECRET}"})
    assert scraped.status_code == 200 and b"trafficmgr_gateway" in scraped.content


def test_healthz_answers_probes_and_shows_detail_to_the_token_only(
    guarded: httpx.Client,
) -> None:
    probe = guarded.get("/healthz")
    assert probe.status_code == 200 and probe.json() == {"status": "ok"}
    detail = guarded.get("/healthz", headers={"Authorization": f"Bearer {SECRET}"}).json()
    assert {"status", "table", "in_flight", "queued"} <= set(detail)


def test_without_a_token_both_stay_open(open_gateway: httpx.Client) -> None:
    assert open_gateway.get("/metrics").status_code == 200
    assert "in_flight" in open_gateway.get("/healthz").json()
