"""Residency through the gateway: an EU client never leaves the EU, whatever fails; the
client's address comes from X-Forwarded-For only when a trusted proxy sent it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import httpx2 as httpx
import pytest

from tests.gateway.world import EU_IP, EU_REGIONS, TOKEN, US_IP, GatewayThread, make_core
from trafficmgr.gateway import GatewaySettings, networks
from trafficmgr.routing.types import Fleet, UnlocatedClients
from trafficmgr.simserver import Fault, FaultKind, SimServerThread

AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture
def faults(sim: SimServerThread) -> Iterator[SimServerThread]:
    yield sim
    for name in sim.servers.addresses():
        sim.set_fault(name, Fault())


def post(gw: GatewayThread, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        gw.base_url + "/chat/completions", json=BODY, headers={**AUTH, **headers}, timeout=20
    )


def test_eu_client_is_served_in_the_eu_even_when_eu_endpoints_fail(
    gateway: GatewayThread, faults: SimServerThread
) -> None:
    eu = {"X-Forwarded-For": EU_IP}
    for _ in range(10):
        r = post(gateway, eu)
        assert r.status_code == 200 and r.headers["x-trafficmgr-region"] in EU_REGIONS
    for name in ("euw-1", "euw-2"):
        faults.set_fault(name, Fault(FaultKind.ERROR))
    for _ in range(10):
        r = post(gateway, eu)
        assert r.status_code == 200, r.text
        assert r.headers["x-trafficmgr-endpoint"] == "euc-1"
    faults.set_fault("euc-1", Fault(FaultKind.DOWN))
    for _ in range(5):
        r = post(gateway, eu)
        assert r.status_code in (502, 503), r.text  # never sent to us-east
        assert r.headers.get("x-trafficmgr-region", "eu") != "us-east"
    assert post(gateway, {"X-Forwarded-For": US_IP}).status_code == 200


def test_forwarded_for_is_ignored_from_an_untrusted_peer(fleet: Fleet) -> None:
    core, _ = make_core(fleet)
    with GatewayThread(core, GatewaySettings(trusted_proxies=())) as gw:
        seen = set()
        for _ in range(5):
            r = post(gw, {"X-Forwarded-For": EU_IP})
            seen.add(r.headers["x-trafficmgr-region"])
        assert seen == {"us-east"}  # the peer (loopback, unlocated) is the client


def test_forwarded_for_chain_skips_trusted_hops(gateway: GatewayThread) -> None:
    r = post(gateway, {"X-Forwarded-For": f"{EU_IP}, 127.0.0.1"})
    assert r.headers["x-trafficmgr-region"] in EU_REGIONS
    r = post(gateway, {"X-Forwarded-For": f"{EU_IP}, {US_IP}"})  # the last untrusted hop
    assert r.headers["x-trafficmgr-region"] == "us-east"


def unlocated(fleet: Fleet, setting: str) -> Fleet:
    return replace(fleet, unlocated=UnlocatedClients.parse(setting))


def test_unlocated_client_is_refused_when_the_fleet_denies_them(fleet: Fleet) -> None:
    core, _ = make_core(unlocated(fleet, "deny"))
    with GatewayThread(core, GatewaySettings(trusted_proxies=())) as gw:
        r = post(gw, {"X-Forwarded-For": EU_IP})  # ignored: the loopback peer is the client
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert error["code"] == "client_location_unknown"
        assert error["type"] == "request_forbidden"
        assert "unlocated_clients deny" in error["message"]
        assert "retry-after" not in r.headers


def test_unlocated_client_is_kept_in_the_rule_the_fleet_names(fleet: Fleet) -> None:
    core, _ = make_core(unlocated(fleet, "rule:gdpr"))
    with GatewayThread(core, GatewaySettings(trusted_proxies=())) as gw:
        regions = {post(gw, {}).headers["x-trafficmgr-region"] for _ in range(10)}
        assert regions <= set(EU_REGIONS) and regions


def test_gateway_warns_at_start_when_it_trusts_no_proxy(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trafficmgr.gateway")
    core, _ = make_core(unlocated(fleet, "deny"))
    with GatewayThread(core, GatewaySettings(trusted_proxies=())):
        pass
    warned = [r.getMessage() for r in caplog.records if "no trusted proxy" in r.getMessage()]
    assert len(warned) == 1 and "unlocated_clients deny" in warned[0], warned
    caplog.clear()
    with GatewayThread(
        make_core(fleet)[0], GatewaySettings(trusted_proxies=networks(["10.0.0.0/8"]))
    ):
        pass
    assert not [r for r in caplog.records if "no trusted proxy" in r.getMessage()]
