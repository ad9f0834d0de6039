"""The embedded mode's moving parts in one process: control loop, GeoDNS, simulated agents.

``manage.py demo`` starts an ``EmbeddedSystem`` once its web server listens and stops it on
Ctrl-C. Each part is the real component of the distributed mode run in a thread: the same
tick service Celery runs, the same DNS server ``manage.py dnsserver`` runs, and the same
agent ``trafficmgr-agent --simulate`` runs, pushing heartbeats over HTTP.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from regions import conf, hotstate
from regions.access.issue import create_token
from regions.alerts.tasks import AlertWorker
from regions.loop.control import EmbeddedTicker
from regions.models import AgentToken
from trafficmgr.routing.types import Fleet

log = logging.getLogger(__name__)

DEMO_TRACE = Path(settings.BASE_DIR) / "examples" / "traces" / "azure_code_2000.csv"


@dataclass
class EmbeddedSystem:
    """Start and stop the control loop, the DNS server and one simulated agent per endpoint."""

    fleet: Fleet
    web_url: str
    dns_host: str
    dns_port: int
    agents: bool = True
    agent_load: float = 0.25
    # endpoint → its server's /metrics: agents read them as they read a vLLM node's
    metrics_urls: dict[str, str] = field(default_factory=dict)
    ticker: EmbeddedTicker | None = None
    alerts: AlertWorker | None = None
    dns_thread: Any = None
    dns_server: Any = None
    agent_threads: list[tuple[Any, threading.Thread]] = field(default_factory=list)
    unfollow: Callable[[], None] | None = None

    def start(self) -> None:
        self.ticker = EmbeddedTicker(conf.tick_seconds()).start()
        self.alerts = AlertWorker().start()  # deliveries never run inside a tick
        self._start_dns()
        if self.agents:
            self._start_agents()

    def _start_dns(self) -> None:
        from trafficmgr.dns.config import ServerConfig
        from trafficmgr.dns.server import DnsServer, ServerThread

        config = ServerConfig(
            host=self.dns_host,
            port=self.dns_port,
            state_file=str(Path(settings.VAR_DIR) / "dns-table.json"),
            geoip_db=conf.geoip_db(),
        )
        self.dns_server = DnsServer(self.fleet, config)
        self.dns_thread = ServerThread(self.dns_server)
        self.dns_thread.start()
        # Every table the loop publishes, in this process or (with Redis) any other.
        self.unfollow = hotstate.get().follow_tables(self.dns_server.set_table)

    def _start_agents(self) -> None:
        self.agent_threads.extend(
            start_simulated_agents(self.fleet, self.web_url, self.agent_load, self.metrics_urls)
        )

    def stop(self) -> None:
        stop_agents(self.agent_threads)
        self.agent_threads.clear()
        if self.ticker is not None:
            self.ticker.stop()
        if self.alerts is not None:
            self.alerts.stop()
        if self.unfollow is not None:
            self.unfollow()
        if self.dns_thread is not None:
            self.dns_thread.stop()


def start_simulated_agents(
    fleet: Fleet, control_plane: str, load: float, metrics_urls: dict[str, str] | None = None
) -> list[tuple[Any, threading.Thread]]:
    """Issue an agent token per region and start one simulated agent per endpoint."""
    from agents.cli import build_agent
    from agents.config import AgentConfig

    trace = str(DEMO_TRACE) if DEMO_TRACE.is_file() else None
    started: list[tuple[Any, threading.Thread]] = []
    for region in fleet.regions:
        secret = _fresh_agent_token(region.name)
        for seed, endpoint in enumerate(region.endpoints, start=1):
            cfg = AgentConfig(
                control_plane=control_plane,
                token=secret,
                endpoint=endpoint.name,
                interval_s=fleet.failover.heartbeat_interval_s,
                simulate=True,
                sim_gpu=endpoint.gpu if endpoint.gpu in {"H100", "A100", "L4"} else "H100",
                sim_gpus=endpoint.gpus,
                sim_trace=trace,
                sim_load=load,
                sim_seed=seed,
                models=endpoint.models,
                metrics_url=(metrics_urls or {}).get(endpoint.name),
            )
            agent = build_agent(cfg)
            thread = threading.Thread(target=agent.run, name=f"agent-{endpoint.name}", daemon=True)
            thread.start()
            started.append((agent, thread))
    return started


def _fresh_agent_token(region: str) -> str:
    """Revoke the previous run's agent token of ``region`` and issue a new one."""
    name = f"demo agent {region}"
    for old in AgentToken.objects.filter(name=name, revoked_at__isnull=True):
        old.revoked_at = timezone.now()
        old.save(update_fields=["revoked_at"])
    _, secret = create_token(name, "agent", region=region, created_by="demo")
    return secret


def stop_agents(agents: list[tuple[Any, threading.Thread]]) -> None:
    """Stop agents and wait briefly for their last heartbeats."""
    for agent, _ in agents:
        agent.stop()
    for _, thread in agents:
        thread.join(timeout=3)
