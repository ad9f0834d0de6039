"""Upstream failures: retried on another endpoint before the first byte, never after; a
stream cut mid-way ends with a clean SSE error event; failing endpoints are ejected and come
back through a half-open probe."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import openai
import pytest

from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.world import TOKEN, US_IP, GatewayThread, LoopThread, ledger_drained, make_core
from trafficmgr.gateway import GatewaySettings
from trafficmgr.routing.types import Fleet
from trafficmgr.simserver import Fault, FaultKind, SimServerThread

US = {"X-Forwarded-For": US_IP}
MESSAGES = [{"role": "user", "content": "hello"}]


def pointed(fleet: Fleet, name: str, port: int) -> Fleet:
    """Return the fleet with endpoint ``name`` served at 127.0.0.1:``port``."""
    regions = tuple(
        replace(
            r,
            endpoints=tuple(
                replace(e, address=f"127.0.0.1:{port}") if e.name == name else e
                for e in r.endpoints
            ),
        )
        for r in fleet.regions
    )
    return replace(fleet, regions=regions)


@pytest.fixture
def faults(sim: SimServerThread) -> Iterator[SimServerThread]:
    yield sim
    for name in sim.servers.addresses():
        sim.set_fault(name, Fault())


def run_gateway(fleet: Fleet, **config: object) -> GatewayThread:
    core, _ = make_core(fleet, **{"region": "us-east", "default_strategy": "round_robin", **config})
    settings = GatewaySettings(first_byte_timeout_s=1.0, idle_timeout_s=0.5)
    return GatewayThread(core, settings)


def ask(gw: GatewayThread, stream: bool = False, **kw: object):  # type: ignore[no-untyped-def]
    client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=10)
    return client.chat.completions.with_raw_response.create(
        model="m1",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=4,
        stream=stream,
        **{"extra_headers": US, **kw},  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("kind", [FaultKind.ERROR, FaultKind.DOWN, FaultKind.REFUSE])
def test_failures_before_the_first_byte_are_retried_elsewhere(
    fleet: Fleet, faults: SimServerThread, kind: FaultKind
) -> None:
    faults.set_fault("use-1", Fault(kind))
    with run_gateway(fleet) as gw:
        for stream in (False, True, False, True):
            raw = ask(gw, stream=stream)
            assert raw.headers["x-trafficmgr-endpoint"] == "use-2"
            if stream:
                assert list(raw.parse())
        assert ledger_drained(gw.core) == 0
        text = (
            openai.OpenAI(base_url=gw.base_url, api_key=TOKEN)
            ._client.get(gw.origin + "/metrics")
            .text
        )
        assert "trafficmgr_gateway_retries_total" in text


def test_every_endpoint_failing_is_a_502(fleet: Fleet, faults: SimServerThread) -> None:
    faults.set_fault("use-1", Fault(FaultKind.ERROR, status=500))
    faults.set_fault("use-2", Fault(FaultKind.ERROR, status=503))
    with run_gateway(fleet) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gw)
        assert caught.value.status_code == 502
        assert ledger_drained(gw.core) == 0


def test_consecutive_failures_eject_and_a_probe_returns_the_endpoint(
    fleet: Fleet, faults: SimServerThread
) -> None:
    faults.set_fault("use-1", Fault(FaultKind.ERROR))
    with run_gateway(fleet, consecutive_failures=2, base_ejection_s=0.6) as gw:
        for _ in range(6):
            assert ask(gw).headers["x-trafficmgr-endpoint"] == "use-2"
        assert gw.core.outlier.ejections_total >= 1
        faults.set_fault("use-1", Fault())
        time.sleep(0.7)
        served = {ask(gw).headers["x-trafficmgr-endpoint"] for _ in range(6)}
        assert served == {"use-1", "use-2"}  # back from ejection through the probe


def test_a_stalled_stream_ends_with_an_error_event(fleet: Fleet, faults: SimServerThread) -> None:
    with run_gateway(fleet, region="us-east") as gw:
        gw.core.drain("use-2")
        client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=10)
        stream = client.chat.completions.create(
            model="m1",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=100000,
            stream=True,
            extra_body={"ignore_eos": True},
            extra_headers=US,
        )
        got = 0
        with pytest.raises(openai.APIError) as caught:
            for _ in stream:
                got += 1
                if got == 3:
                    faults.set_fault("use-1", Fault(FaultKind.STALL))
        assert "no data" in str(caught.value.message)
        assert ledger_drained(gw.core) == 0


@pytest.fixture
def fake() -> Iterator[Callable[[str], FakeUpstream]]:
    """Start misbehaving upstreams on a loop of their own."""
    thread, started = LoopThread(), []

    def start(behaviour: str) -> FakeUpstream:
        upstream = FakeUpstream(behaviour)
        thread.call(upstream.start())
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        thread.call(upstream.stop())
    thread.close()


@pytest.mark.parametrize("behaviour", ["garbage", "hang"])
def test_garbage_or_silence_before_the_first_byte_is_retried(
    fleet: Fleet, fake: Callable[[str], FakeUpstream], behaviour: str
) -> None:
    upstream = fake(behaviour)
    with run_gateway(pointed(fleet, "use-1", upstream.port)) as gw:
        for stream in (True, True, True):
            raw = ask(gw, stream=stream)
            assert raw.headers["x-trafficmgr-endpoint"] == "use-2"
            assert list(raw.parse())
        assert upstream.requests >= 1
        assert ledger_drained(gw.core) == 0


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [("garbage_mid", "not an SSE event"), ("cut", "connection lost"), ("hang_mid", "no data")],
)
def test_a_stream_broken_mid_way_ends_cleanly(
    fleet: Fleet, fake: Callable[[str], FakeUpstream], behaviour: str, message: str
) -> None:
    upstream = fake(behaviour)
    with run_gateway(pointed(fleet, "use-1", upstream.port)) as gw:
        gw.core.drain("use-2")
        client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=10)
        stream = client.chat.completions.create(
            model="m1",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            extra_headers=US,
        )
        seen = 0
        with pytest.raises(openai.APIError) as caught:
            for _ in stream:
                seen += 1
        assert seen == 3 and message in str(caught.value.message)
        assert upstream.requests == 1  # never retried after the first byte
        gw.core.undrain("use-2")
        assert ask(gw).status_code == 200  # the gateway keeps serving
        assert ledger_drained(gw.core) == 0


def test_upstream_429_is_retried_elsewhere_and_never_ejects(
    fleet: Fleet, fake: Callable[[str], FakeUpstream]
) -> None:
    upstream = fake("throttle")
    with run_gateway(pointed(fleet, "use-1", upstream.port), consecutive_failures=1) as gw:
        for _ in range(4):
            raw = ask(gw, extra_headers={**US, "x-request-id": "rid-429"})
            assert raw.headers["x-trafficmgr-endpoint"] == "use-2"
        assert upstream.requests >= 1
        assert upstream.headers["x-request-id"] == "rid-429"  # passed upstream
        assert "authorization" not in upstream.headers  # the client token stays here
        assert gw.core.outlier.ejections_total == 0
        gw.core.drain("use-2")
        with pytest.raises(openai.RateLimitError) as caught:
            ask(gw)
        assert caught.value.response.headers["Retry-After"] == "7"
