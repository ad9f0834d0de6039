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

E2E_YAML = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    priority: 1
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: A100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    priority: 2
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 3, hold_down_s: 2,
           all_down: fail_open}
clients:
  - {country: DE, share: 0.3}
  - {country: GB, share: 0.2}
  - {country: US, share: 0.5}
"""


pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(transactional_db: None, postgres_db: str) -> Any:
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
    from regions.fleet.services import fleet_snapshot
    from trafficmgr.fleetfile import load_fleet_text

    with acting_as("fixture:e2e", "system"):
        apply_plan(plan_fleet(load_fleet_text(E2E_YAML)))
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
