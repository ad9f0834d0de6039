"""The demo's request path: simulated inference servers, the gateway, and trace-driven clients.

``manage.py demo`` used to move its dashboard with canned load inside each simulated agent,
which did not follow routing. Here real requests make the load instead:

- every endpoint of the fleet is served by ``trafficmgr.simserver`` on loopback (an endpoint
  whose address is already loopback exactly there, the others from ``--base-port`` on, in
  fleet order), and the fleet the demo applies names those addresses, so ``/route`` answers
  and the gateway dial what really serves;
- the gateway (``manage.py gateway``'s core over the control plane) listens on
  ``--gateway`` (default 127.0.0.1:8080) as an OpenAI base URL; loopback is a trusted proxy;
- a client replays a trace through it, each request from a client of the fleet's ``clients``
  mix (an address in that country via ``X-Forwarded-For``), so routing decides where the load
  lands; the agents read the servers' ``/metrics`` like a vLLM node's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from django.utils import timezone

from regions.access.issue import create_token
from regions.decisions.source import DjangoControlPlane
from regions.drills.subnets import probe_address, subnet_for
from regions.models import ApiToken
from trafficmgr.gateway import GatewaySettings, RunningGateway, networks, start_gateway
from trafficmgr.requestpath import RequestPath, RequestPathConfig
from trafficmgr.routing.types import Fleet
from trafficmgr.sim.traces import read_trace
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses
from trafficmgr.simserver.servers import new_event_loop

log = logging.getLogger(__name__)

BASE_PORT = 8100
DEMO_RATE_RPS = (
    6.0  # requests a second the demo's clients send: the dashboard moves, the laptop copes
)
CLIENT_TOKEN_NAME = "demo clients"
MAX_PROMPT_WORDS = 4_000  # keeps the demo's requests light on the one machine it runs on
MAX_OUTPUT_TOKENS = 256


def client_token() -> str:
    """Revoke the previous run's demo client token and issue a new one (role ``client``)."""
    for old in ApiToken.objects.filter(name=CLIENT_TOKEN_NAME, revoked_at__isnull=True):
        old.revoked_at = timezone.now()
        old.save(update_fields=["revoked_at"])
    _, secret = create_token(CLIENT_TOKEN_NAME, "client", created_by="demo")
    return secret


def serve_endpoints(fleet: Fleet, base_port: int = BASE_PORT) -> tuple[SimServerThread, Fleet]:
    """Serve every endpoint on loopback; return the servers and the fleet naming them."""
    servers = SimServerThread(fleet_specs(fleet, base_port=base_port), options=ServeOptions())
    addresses = servers.start()
    return servers, with_addresses(fleet, addresses)


@dataclass
class DemoRequestPath:
    """The gateway and the trace-driven clients, each on its own event loop thread."""

    fleet: Fleet
    gateway_host: str
    gateway_port: int
    client_token: str
    trace: Path | None
    rate_rps: float = 4.0
    seed: int = 1

    def __post_init__(self) -> None:
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="demo-gateway")
        self._thread.daemon = True
        self._gateway: RunningGateway | None = None
        self._clients: concurrent.futures.Future[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.sent = 0
        self.failed = 0

    def start(self) -> str:
        """Start the gateway (and the clients when a trace is given); return its base URL."""
        self._thread.start()
        core = RequestPath(DjangoControlPlane(), RequestPathConfig())
        settings = GatewaySettings(trusted_proxies=networks(["127.0.0.1", "::1"]))
        self._gateway = self._call(
            start_gateway(core, settings, self.gateway_host, self.gateway_port)
        )
        if self.trace is not None and self.rate_rps > 0:
            self._clients = asyncio.run_coroutine_threadsafe(self._replay(), self._loop)
        return self._gateway.base_url

    def stop(self) -> None:
        if self._clients is not None:
            self._clients.cancel()
        if self._gateway is not None:
            self._call(self._gateway.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, coro: object, timeout: float = 30.0) -> RunningGateway:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    async def _replay(self) -> None:
        """Send the trace's requests through the gateway at about ``rate_rps``, forever."""
        assert self._gateway is not None
        requests = read_trace(str(self.trace)).requests
        rng = random.Random(self.seed)
        clients = _client_addresses(self.fleet)
        models = sorted(self.fleet.models())
        url = f"{self._gateway.base_url}/completions"
        headers = {"Authorization": f"Bearer {self.client_token}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            while True:
                for r in requests:
                    await asyncio.sleep(rng.expovariate(self.rate_rps))
                    body = {
                        "model": rng.choice(models),
                        "prompt": " ".join(["word"] * min(r.input_tokens, MAX_PROMPT_WORDS)),
                        "max_tokens": max(1, min(r.output_tokens, MAX_OUTPUT_TOKENS)),
                        "ignore_eos": True,
                    }
                    client = rng.choices(clients[0], clients[1])[0]
                    task = asyncio.ensure_future(self._send(session, url, body, client))
                    self._pending.add(task)
                    task.add_done_callback(self._pending.discard)

    async def _send(
        self, session: aiohttp.ClientSession, url: str, body: dict[str, object], client: str
    ) -> None:
        self.sent += 1
        try:
            async with session.post(url, json=body, headers={"X-Forwarded-For": client}) as resp:
                await resp.read()
                if resp.status >= 400:
                    self.failed += 1
        except (TimeoutError, aiohttp.ClientError):
            self.failed += 1


def _client_addresses(fleet: Fleet) -> tuple[list[str], list[float]]:
    """Return one address per client country of the fleet's mix, and the shares."""
    mix = [(c.country, c.share) for c in fleet.clients] or [(r.country, 1.0) for r in fleet.regions]
    addresses, shares = [], []
    for country, share in mix:
        subnet = subnet_for(country, None)
        if subnet is not None:
            addresses.append(probe_address(subnet))
            shares.append(share)
    return (addresses or ["127.0.0.1"]), (shares or [1.0])
