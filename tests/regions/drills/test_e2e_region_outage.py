"""A real region_outage drill, end to end, in one process, bounded to well under a minute.

The control plane is Django's live test server (real HTTP); one simulated agent per endpoint
(``trafficmgr-agent --simulate``, built by ``agents.cli.build_agent``) pushes heartbeats to
it; the control loop ticks every second (``EmbeddedTicker``); the real GeoDNS server answers
on a free port from the tables the loop publishes. The drill injects ``report_unhealthy``
through the agents and measures from vantage points (DNS with ECS and the route API).
Needs PostgreSQL: its threads write concurrently, which in-memory SQLite cannot take.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from regions.drills.measure import MeasureSetup
from regions.drills.runner import run_drill
from tests.regions.drills.conftest import RecordingHotState
from tests.regions.loop.conftest import wait_for
from tests.worlds import DRILL

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(transactional_db: None, postgres_db: str) -> Any:
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
    from regions.fleet.services import fleet_snapshot
    from trafficmgr.fleetfile import load_fleet_text

    with acting_as("fixture:e2e", "system"):
        apply_plan(plan_fleet(load_fleet_text(DRILL)))
    return fleet_snapshot()


@pytest.fixture
def running_fleet(fleet: Any, live_server: Any, store: RecordingHotState) -> Iterator[Any]:
    """The loop ticking, the DNS server answering, an agent per endpoint; stopped afterwards."""
    from agents.cli import build_agent
    from agents.config import AgentConfig
    from regions.access.issue import create_token
    from regions.loop.control import EmbeddedTicker
    from trafficmgr.dns.config import ServerConfig
    from trafficmgr.dns.server import DnsServer, ServerThread

    dns = DnsServer(fleet, ServerConfig(host="127.0.0.1", port=0, state_file=None))
    dns_thread = ServerThread(dns)
    address = dns_thread.start()
    store.listeners.append(dns.set_table)
    ticker = EmbeddedTicker(1.0).start()
    agents: list[tuple[Any, threading.Thread]] = []
    for region in fleet.regions:
        _, secret = create_token(f"e2e {region.name}", "agent", region=region.name)
        for endpoint in region.endpoints:
            cfg = AgentConfig(
                control_plane=live_server.url,
                token=secret,
                endpoint=endpoint.name,
                interval_s=1.0,
                simulate=True,
                sim_gpu=endpoint.gpu,
                sim_gpus=endpoint.gpus,
                sim_load=0.1,
                models=endpoint.models,
            )
            agent = build_agent(cfg)
            thread = threading.Thread(target=agent.run, daemon=True)
            thread.start()
            agents.append((agent, thread))
    try:
        yield {"dns": address, "url": live_server.url}
    finally:
        for agent, _ in agents:
            agent.stop()
        for _, thread in agents:
            thread.join(5)
        ticker.stop()
        dns_thread.stop()


def all_healthy(store: RecordingHotState) -> bool:
    table = store.table()
    return table is not None and all(s.state.value == "healthy" for s in table.regions.values())


def test_region_outage_moves_dns_within_targets(
    running_fleet: dict[str, Any], store: RecordingHotState
) -> None:
    from regions.audit.trail import acting_as
    from regions.drills import service

    started = time.monotonic()
    wait_for(lambda: all_healthy(store), timeout=15)
    with acting_as("e2e", "cli"):
        drill = service.create_drill("region_outage", "eu-west", 8, {"recovery_wait_s": 20})
    setup = MeasureSetup(dns=running_fleet["dns"], route_url=running_fleet["url"], baseline_s=1.5)
    lines: list[str] = []
    report = run_drill(drill.pk, setup, lines.append)
    assert report is not None, lines
    context = f"{report}\n" + "\n".join(lines)

    assert report["verdict"] == "pass", context
    assert report["detected_after_s"] is not None and report["detected_after_s"] <= 4.0, context
    moved = report["dns_changed_after_s"]
    assert {"DE", "GB"} <= set(moved), context  # EU clients were answered by eu-west
    assert "US" not in moved
    assert report["dns_changed_after_s_max"] is not None, context
    assert report["dns_changed_after_s_max"] <= 5.0, context
    assert report["residency_violations"] == 0, context
    assert report["wrong_answers"] == 0, context
    assert report["table_changed_after_s"] is not None, context
    assert report["recovered_after_s"] is not None, context
    assert report["answers"]["dns"] > 50 and report["answers"]["route"] > 10, context
    assert time.monotonic() - started < 55
