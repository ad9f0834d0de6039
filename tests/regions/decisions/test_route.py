"""POST /api/v1/route: region from the table, endpoint from live load, residency always."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.regions.loop.conftest import API, DE_IP, ENDPOINTS, GB_IP, IN_IP, REGION_OF, US_IP

pytestmark = pytest.mark.django_db
EU = {"eu-west", "eu-central"}
EU_ENDPOINTS = tuple(e for e in ENDPOINTS if REGION_OF[e] in EU)
OTHERS = tuple(e for e in ENDPOINTS if REGION_OF[e] not in EU)


def route(client: Any, **body: Any) -> Any:
    doc = {
        "model": "llama-3-70b",
        "input_tokens": 1800,
        "max_output_tokens": 256,
        "priority": "interactive",
        **body,
    }
    return client.generic(
        "POST", f"{API}/route", json.dumps(doc).encode(), content_type="application/json"
    )


@pytest.fixture
def live(feed: Any) -> float:
    """Every endpoint reported just now and a tick published the table."""
    from regions.loop.control import run_tick

    now = time.time()
    feed(now)
    assert run_tick(now).ran
    return now


@pytest.fixture
def eu_down(feed: Any) -> float:
    """EU endpoints last reported 10 s ago, the others just now; the table has EU down."""
    from regions.loop.control import run_tick

    now = time.time()
    feed(now - 10, EU_ENDPOINTS)
    feed(now, OTHERS)
    run_tick(now)
    return now


def test_a_decision_names_region_endpoint_address_and_version(
    viewer_client: Any, live: float, fresh_hot_state: Any
) -> None:
    from regions.fleet.services import fleet_snapshot

    response = route(viewer_client, client_ip=US_IP)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"region", "endpoint", "address", "table_version", "reason"}
    assert body["region"] == "us-east"
    endpoint = next(e for e in fleet_snapshot().endpoints() if e.name == body["endpoint"])
    assert endpoint.region == "us-east" and body["address"] == endpoint.address
    assert body["table_version"] == fresh_hot_state.table_version()
    assert "region us-east" in body["reason"] and "ai_aware" in body["reason"]


def test_one_client_keeps_its_region(viewer_client: Any, live: float) -> None:
    regions = {route(viewer_client, client_ip=DE_IP).json()["region"] for _ in range(10)}
    assert len(regions) == 1


def test_client_country_instead_of_an_address(
    viewer_client: Any, live: float, fresh_hot_state: Any
) -> None:
    from trafficmgr.routing.geo import country_location
    from trafficmgr.routing.table import lookup

    listed = {
        w.region for w in lookup(fresh_hot_state.table(), country_location("IN"), "llama-3-70b")
    }
    assert route(viewer_client, client_country="IN").json()["region"] in listed
    assert route(viewer_client, client_country="DE").json()["region"] in EU


def test_eu_clients_only_ever_get_eu_regions(viewer_client: Any, live: float) -> None:
    for i in range(40):
        ip = GB_IP if i % 2 else f"78.46.{i}.{i + 1}"
        assert route(viewer_client, client_ip=ip).json()["region"] in EU


def test_gb_with_eu_down_and_fail_closed_gets_503_not_another_region(
    viewer_client: Any, eu_down: float, fresh_hot_state: Any
) -> None:
    assert fresh_hot_state.table().regions["eu-west"].state.value == "down"
    response = route(viewer_client, client_ip=GB_IP)
    assert response.status_code == 503, response.content
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"] == "no_capacity"
    assert route(viewer_client, client_ip=US_IP).status_code == 200  # others unaffected


def test_gb_with_eu_down_and_fail_open_gets_an_eu_region(
    viewer_client: Any, feed: Any, set_all_down: Any, fresh_hot_state: Any
) -> None:
    from regions.loop.control import run_tick

    set_all_down("fail_open")
    now = time.time()
    feed(now - 10, EU_ENDPOINTS)
    feed(now, OTHERS)
    run_tick(now)
    assert fresh_hot_state.table().regions["eu-central"].state.value == "down"
    for _ in range(10):
        response = route(viewer_client, client_ip=GB_IP)
        assert response.status_code == 200, response.content
        assert response.json()["region"] in EU
        assert "fail_open" in response.json()["reason"]


def test_eu_endpoints_failing_between_ticks_give_503_never_a_us_endpoint(
    viewer_client: Any, live: float, feed: Any
) -> None:
    feed(time.time() + 0.5, EU_ENDPOINTS, probe_ok=False)  # the table still says healthy
    from regions.decisions import route as decisions

    decisions.forget()
    response = route(viewer_client, client_ip=GB_IP)
    assert response.status_code == 503
    assert "probe" in response.json()["detail"] or "healthy" in response.json()["detail"]


def test_a_listed_region_failing_between_ticks_falls_back_to_an_allowed_one(
    viewer_client: Any, live: float, feed: Any
) -> None:
    """No 503 in the one-tick gap when residency allows a region the list leaves out."""
    us_east = tuple(e for e in ENDPOINTS if REGION_OF[e] == "us-east")
    feed(time.time() + 0.5, us_east, probe_ok=False)  # the table still says healthy
    from regions.decisions import route as decisions

    decisions.forget()
    response = route(viewer_client, client_ip=US_IP)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["region"] != "us-east"
    assert "catches up" in body["reason"]


def test_before_the_first_tick_routes_by_configuration(viewer_client: Any, loop_world: Any) -> None:
    response = route(viewer_client, client_ip=GB_IP)
    assert response.status_code == 200, response.content
    assert response.json()["region"] in EU
    assert "no evidence yet" in response.json()["reason"]
    assert route(viewer_client, client_ip=IN_IP).status_code == 200


def test_decisions_are_counted(viewer_client: Any, eu_down: float, fresh_hot_state: Any) -> None:
    route(viewer_client, client_ip=US_IP)
    route(viewer_client, client_ip=GB_IP)
    counters = fresh_hot_state.counters()
    assert counters["decisions|endpoint=use-1\x1foutcome=weighted\x1fregion=us-east"] == 1
    assert counters["decisions|endpoint=\x1foutcome=no_allowed_region\x1fregion="] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"client_ip": US_IP, "input_tokens": 0}, "input_tokens"),
        ({"client_ip": US_IP, "input_tokens": 1_000_001}, "input_tokens"),
        ({"client_ip": US_IP, "max_output_tokens": 0}, "max_output_tokens"),
        ({"client_ip": US_IP, "max_output_tokens": 10**7}, "max_output_tokens"),
        ({"client_ip": US_IP, "input_tokens": "1800"}, "input_tokens"),
        ({"client_ip": US_IP, "input_tokens": 18.5}, "input_tokens"),
        ({"client_ip": US_IP, "priority": "urgent"}, "priority"),
        ({"client_ip": US_IP, "model": "gpt-9"}, "model"),
        ({"client_ip": US_IP, "model": 7}, "model"),
        ({"client_ip": US_IP, "tenant": "x"}, "tenant"),
        ({"client_ip": "300.1.1.1"}, "client_ip"),
        ({"client_country": "de"}, "client_country"),
        ({"client_country": "ZZ"}, "client_country"),
        ({"client_ip": US_IP, "client_country": "US"}, "client_country"),
        ({}, "client_ip"),
    ],
)
def test_bad_bodies_name_the_field(
    viewer_client: Any, live: float, body: dict[str, Any], field: str
) -> None:
    response = route(viewer_client, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"], response.json()


def test_malformed_and_non_finite_bodies(viewer_client: Any, live: float) -> None:
    bad = [b"{", b'{"model": "llama-3-70b", "input_tokens": NaN}', b"[]"]
    for body in bad:
        response = viewer_client.generic(
            "POST", f"{API}/route", body, content_type="application/json"
        )
        assert response.status_code == 400, body


def test_agent_tokens_and_anonymous_callers_may_not_route(
    agent_api: Any, anon_client: Any, live: float
) -> None:
    assert route(agent_api("eu-west"), client_ip=US_IP).status_code == 403
    assert route(anon_client, client_ip=US_IP).status_code == 401
