"""The EPP test bench: simulated upstreams, the EPP, and a real Envoy in front of them.

Each module gets one bench per body mode (``buffered``, ``streamed``, ``full_duplex``); each
test gets it
back clean (upstreams up and healthy, the core's records empty) and leaves it with nothing
in flight: a request the EPP failed to close would fail the test that leaked it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.epp.harness import EnvoyProcess, LoopThread, envoy_binary, fleet_yaml
from tests.epp.roundrobin import RoundRobinDecision
from tests.epp.upstream import Upstream
from trafficmgr.epp.decision import ClientIdentity, Decision
from trafficmgr.epp.envoy_config import EnvoyOptions, render
from trafficmgr.epp.exchange import ExchangeSettings
from trafficmgr.epp.server import EppServer, start_server
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.ports import free_port

TOKEN = "epp-test-token"
MAX_BODY = 200_000  # the EPP's limit; Envoy buffers up to twice that
MODES = ("buffered", "streamed", "full_duplex")


@dataclass
class Bench:
    mode: str
    loop: LoopThread
    upstreams: list[Upstream]
    decision: RoundRobinDecision
    epp: EppServer
    epp_address: str
    envoy: EnvoyProcess
    base_url: str

    def upstream(self, name: str) -> Upstream:
        return next(u for u in self.upstreams if u.name == name)

    def kill(self, name: str) -> None:
        self.loop.run(self.upstream(name).stop())

    def restore(self) -> None:
        for upstream in self.upstreams:
            upstream.fail_with = None
            upstream.token_delay_s = 0.0
            upstream.served = 0
            upstream.headers_seen.clear()
            if not upstream.running:
                self.loop.run(upstream.start())
        self.decision.max_in_flight = 1000
        self.decision.reset()

    def wait_idle(self, timeout: float = 5.0) -> int:
        deadline = time.monotonic() + timeout
        while self.decision.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.decision.in_flight


@pytest.fixture(scope="session")
def envoy_path() -> Path:
    binary, why = envoy_binary()
    if binary is None:
        pytest.skip(why)
    return binary


def start_bench(
    mode: str, envoy_path: Path, workdir: Path, core: Callable[[Fleet], Decision] | None = None
) -> Bench:
    """Upstreams u0-u2 in eu-west and u3 in us-east, the EPP over ``core`` (default: the
    round robin), and Envoy in ``mode``."""
    loop = LoopThread()
    upstreams = [Upstream(f"u{i}", free_port()) for i in range(4)]
    for upstream in upstreams:
        loop.run(upstream.start())
    models = {"u0": ["m1"], "u1": ["m1"], "u2": ["m1", "m2"], "u3": ["m1"]}
    regions = {
        "eu-west": [(u.name, u.address, models[u.name]) for u in upstreams[:3]],
        "us-east": [(u.name, u.address, models[u.name]) for u in upstreams[3:]],
    }
    fleet = load_fleet_text(fleet_yaml(regions))
    decision = RoundRobinDecision(
        fleet, tokens={TOKEN: ClientIdentity("tester", "acme")}, model_fallbacks={"m0": "m2"}
    )
    epp_address = f"127.0.0.1:{free_port()}"
    settings = ExchangeSettings(max_body_bytes=MAX_BODY, full_duplex=mode == "full_duplex")
    epp = loop.run(start_server(core(fleet) if core else decision, epp_address, settings))
    listen, admin = free_port(), free_port()
    options = EnvoyOptions(
        listen=f"127.0.0.1:{listen}",
        epp=epp_address,
        admin=f"127.0.0.1:{admin}",
        body_mode=mode,
        max_body_bytes=2 * MAX_BODY,
        subset_header=True,
        max_fallbacks=5,
    )
    config = workdir / f"envoy-{mode}.yaml"
    config.write_text(render(fleet, options))
    envoy = EnvoyProcess(envoy_path, config, admin, workdir / f"envoy-{mode}.log")
    envoy.wait_ready()
    base_url = f"http://127.0.0.1:{listen}"
    return Bench(mode, loop, upstreams, decision, epp, epp_address, envoy, base_url)


def stop_bench(bench: Bench) -> None:
    bench.envoy.stop()
    bench.loop.run(bench.epp.stop(0))
    for upstream in bench.upstreams:
        bench.loop.run(upstream.stop())
    bench.loop.stop()


@pytest.fixture(scope="module", params=MODES)
def module_bench(
    request: pytest.FixtureRequest, envoy_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Bench]:
    bench = start_bench(request.param, envoy_path, tmp_path_factory.mktemp("epp"))
    try:
        yield bench
    finally:
        stop_bench(bench)


@pytest.fixture
def bench(module_bench: Bench) -> Iterator[Bench]:
    module_bench.restore()
    yield module_bench
    leaked = module_bench.wait_idle()
    assert leaked == 0, f"{leaked} request(s) still in flight after the test"
