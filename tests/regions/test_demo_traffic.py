"""The demo's request path: trace requests through the gateway to simulated servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from regions.access.issue import create_token
from regions.demo.traffic import DemoRequestPath, serve_endpoints
from regions.fleet.plan import apply_plan, plan_fleet
from tests.gateway.world import world_fleet
from tests.regions.loop.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "azure_code_2000.csv"


def test_trace_requests_reach_the_simulated_servers_through_the_gateway() -> None:
    servers, fleet = serve_endpoints(world_fleet(), base_port=0)
    try:
        apply_plan(plan_fleet(fleet), force=True)
        _, secret = create_token("demo clients", "client")
        demo = DemoRequestPath(fleet, "127.0.0.1", 0, secret, TRACE, rate_rps=40.0)
        base = demo.start()
        try:
            assert base.startswith("http://127.0.0.1:")
            assert wait_for(lambda: demo.sent >= 20, timeout=20)
            prompted = sum(
                stats.prompt_tokens
                for e in fleet.endpoints()
                for stats in servers.servers.live(e.name).stats.values()
            )
            assert prompted > 0  # the servers really prefilled the replayed prompts
            assert demo.failed == 0
        finally:
            demo.stop()
    finally:
        servers.stop()
