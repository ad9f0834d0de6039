"""The live fleet drifts from the one Envoy's bootstrap was generated from: no request leaves
its zone.

Envoy runs a bootstrap made from fleet A (eu-west: u0, u1; us-east: u2); the EPP decides
over fleet B, where u1 moved to another address (its old one is dead), u3 joined eu-west and
u5 joined us-east. Whatever the EPP picks, the request is served inside the region of the
plan's first endpoint, or refused with 503: never sent to another region by a fallback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.epp.conftest import TOKEN
from tests.epp.harness import EnvoyProcess, LoopThread, fleet_yaml
from tests.epp.http import Reply, post
from tests.epp.roundrobin import RoundRobinDecision
from tests.epp.upstream import Upstream
from trafficmgr.epp.decision import ClientIdentity, Outcome
from trafficmgr.epp.envoy_config import EnvoyOptions, bootstrap_endpoints, render
from trafficmgr.epp.exchange import ExchangeSettings
from trafficmgr.epp.server import start_server
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

AUTH = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
REGION_OF = {"u0": "eu-west", "u1": "eu-west", "u3": "eu-west", "u2": "us-east", "u5": "us-east"}


@dataclass
class Drift:
    loop: LoopThread
    upstreams: dict[str, Upstream]
    dead: str  # u1's address in the bootstrap, where nothing listens any more

    def fleets(self) -> tuple[str, str]:
        """Fleet A (the bootstrap's) and fleet B (the live one) as fleet files."""
        up = self.upstreams
        a = {
            "eu-west": [("u0", up["u0"].address, ["m1"]), ("u1", self.dead, ["m1"])],
            "us-east": [("u2", up["u2"].address, ["m1"])],
        }
        b = {
            "eu-west": [
                ("u0", up["u0"].address, ["m1"]),
                ("u1", up["u1"].address, ["m1"]),  # readdressed
                ("u3", up["u3"].address, ["m1"]),  # added
            ],
            "us-east": [("u2", up["u2"].address, ["m1"]), ("u5", up["u5"].address, ["m1"])],
        }
        return fleet_yaml(a), fleet_yaml(b)


@pytest.fixture(scope="module")
def drift() -> Iterator[Drift]:
    loop = LoopThread()
    upstreams = {name: Upstream(name, free_port()) for name in REGION_OF}
    for upstream in upstreams.values():
        loop.run(upstream.start())
    try:
        yield Drift(loop, upstreams, f"127.0.0.1:{free_port()}")
    finally:
        for upstream in upstreams.values():
            loop.run(upstream.stop())
        loop.stop()


def _run(
    drift: Drift,
    envoy_path: Path,
    workdir: Path,
    region: str | None,
    check: bool,
    fallbacks: int,
    requests: int = 15,
) -> list[tuple[Reply, RoundRobinDecision]]:
    """Send ``requests`` through Envoy (bootstrap of fleet A) and an EPP over fleet B."""
    text_a, text_b = drift.fleets()
    fleet_a, fleet_b = load_fleet_text(text_a), load_fleet_text(text_b)
    listen, admin, epp = free_port(), free_port(), f"127.0.0.1:{free_port()}"
    options = EnvoyOptions(
        listen=f"127.0.0.1:{listen}", epp=epp, admin=f"127.0.0.1:{admin}", region=region
    )
    config = workdir / "envoy.yaml"
    config.write_text(render(fleet_a, options))
    known = bootstrap_endpoints(str(config)) if check else None
    decision = RoundRobinDecision(
        fleet_b, tokens={TOKEN: ClientIdentity("tester")}, fallbacks=fallbacks
    )
    server = drift.loop.run(
        start_server(decision, epp, ExchangeSettings(envoy_endpoints=known) if check else None)
    )
    envoy = EnvoyProcess(envoy_path, config, admin, workdir / "envoy.log")
    try:
        envoy.wait_ready()
        url = f"http://127.0.0.1:{listen}/v1/chat/completions"
        replies = [post(url, CHAT, AUTH) for _ in range(requests)]
        deadline = time.monotonic() + 5
        while decision.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert decision.in_flight == 0
    finally:
        envoy.stop()
        drift.loop.run(server.stop(0))
    return [(reply, decision) for reply in replies]


@pytest.mark.parametrize("region", [None, "eu-west"], ids=["all-regions", "region-eu-west"])
def test_no_request_leaves_the_region_it_was_planned_in(
    drift: Drift, envoy_path: Path, tmp_path: Path, region: str | None
) -> None:
    """Without the EPP checking the bootstrap, Envoy's per-region clusters alone keep every
    request in its plan's region (an unknown address falls back inside the region, a region
    Envoy lacks is a 503); ``--region`` on one side only is the second case."""
    results = _run(drift, envoy_path, tmp_path, region, check=False, fallbacks=2)
    decision = results[0][1]
    served_regions = set()
    assert len(decision.records) == len(results)
    for (reply, _), record in zip(results, decision.records, strict=True):
        planned = record.plan.targets[0].region
        if reply.status == 200:
            served = REGION_OF[reply.headers["x-upstream"]]
            assert served == planned, (record.plan, reply.headers["x-upstream"])
            served_regions.add(served)
        else:
            assert reply.status == 503, reply.body
            assert reply.json()["error"]["type"] == "server_error"
    assert "eu-west" in served_regions


def test_plans_naming_endpoints_envoy_lacks_are_refused(
    drift: Drift, envoy_path: Path, tmp_path: Path
) -> None:
    """With ``--envoy-bootstrap`` the EPP refuses, 503 with the reason, a plan naming an
    endpoint Envoy does not hold; the others are served by exactly the endpoint planned."""
    results = _run(drift, envoy_path, tmp_path, None, check=True, fallbacks=0, requests=10)
    decision = results[0][1]
    refused = served = 0
    for (reply, _), record in zip(results, decision.records, strict=True):
        (target,) = record.plan.targets
        if target.name in ("u0", "u2"):  # unchanged since the bootstrap
            assert reply.status == 200 and reply.headers["x-upstream"] == target.name
            served += 1
            continue
        assert reply.status == 503
        error = reply.json()["error"]
        assert error["code"] == "endpoint_not_in_envoy", error
        assert target.name in error["message"] and "regenerate" in error["message"]
        assert reply.headers["x-trafficmgr-reason"] == "endpoint_not_in_envoy"
        assert record.finished == [(Outcome.CANCELLED, None)]
        refused += 1
    assert served and refused
    assert drift.upstreams["u1"].served == drift.upstreams["u3"].served == 0
    assert drift.upstreams["u5"].served == 0
