"""A server killed under load: no client sees an error for a request that had not started
streaming, the server is ejected within a second, and it comes back through slow start.

Twelve clients keep long-prompt requests in flight (most streamed, some not) through a
regional gateway over two simulated endpoints; the prompts queue in prefill, so when
``use-1`` is killed several of its requests have not produced a token yet. ``down`` aborts
them (a 503, or for a stream already answered with headers an error event before its first
token) and refuses new ones; ``refuse`` closes the port and the idle keep-alive connections
(in-flight requests finish). Either way the gateway retries what had not started elsewhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2 as httpx
import pytest

from tests.gateway.world import TOKEN, US_IP, GatewayThread, make_core, world_fleet
from trafficmgr.gateway import GatewaySettings
from trafficmgr.simserver import Fault, FaultKind, SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses

PROMPT = " ".join(["word"] * 3000)  # 0.125 s of prefill each at time scale 2: a queue forms
HEADERS = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": US_IP,
           "x-trafficmgr-strategy": "round_robin"}  # fmt: skip
SLOW_START_S = 3.0


@dataclass(slots=True)
class Seen:
    started: float
    stream: bool
    first: float | None = None  # first data event (or the whole answer)
    error: str | None = None
    endpoint: str | None = None


@pytest.fixture
def us_east() -> Iterator[SimServerThread]:
    specs = fleet_specs(world_fleet(), base_port=0, only=("use-1", "use-2"))
    with SimServerThread(specs, time_scale=2.0) as servers:
        yield servers


def one(http: httpx.Client, url: str, stream: bool) -> Seen:
    seen = Seen(time.monotonic(), stream)
    body = {"model": "m1", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8, "ignore_eos": True, "stream": stream}  # fmt: skip
    try:
        with http.stream("POST", url, json=body, headers=HEADERS) as r:
            seen.endpoint = r.headers.get("x-trafficmgr-endpoint")
            if r.status_code != 200:
                seen.error = f"status {r.status_code}"
                return seen
            done = False
            for line in r.iter_lines():
                if line.startswith('data: {"error"'):
                    seen.error = line[:120]
                    return seen
                if seen.first is None and (line.startswith("data: {") or not stream):
                    seen.first = time.monotonic()
                done = done or line.startswith("data: [DONE]") or not stream
            if not done:
                seen.error = "stream ended without [DONE]"
    except httpx.HTTPError as exc:
        seen.error = type(exc).__name__
    return seen


def clients(
    url: str, stop: threading.Event, out: list[Seen], n: int = 12
) -> list[threading.Thread]:
    def work(k: int) -> None:
        with httpx.Client(timeout=30) as http:
            i = 0
            while not stop.is_set():
                out.append(one(http, url, stream=(k + i) % 4 != 0))
                i += 1

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    return threads


def wait_for(check: object, timeout: float) -> float:
    """Poll ``check()`` every 5 ms; return when it first held (monotonic), or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return time.monotonic()
        time.sleep(0.005)
    raise AssertionError(f"not within {timeout} s")


@pytest.mark.parametrize("kind", [FaultKind.DOWN, FaultKind.REFUSE])
def test_killed_server_costs_no_unstarted_request_and_comes_back_slowly(
    us_east: SimServerThread, kind: FaultKind
) -> None:
    fleet = with_addresses(world_fleet(), us_east.servers.addresses())
    core, _ = make_core(fleet, region="us-east", base_ejection_s=1.0, slow_start_s=SLOW_START_S)
    settings = GatewaySettings(first_byte_timeout_s=10, idle_timeout_s=5)
    outlier = core.outlier
    seen: list[Seen] = []
    stop = threading.Event()
    with GatewayThread(core, settings) as gw:
        threads = clients(gw.base_url + "/chat/completions", stop, seen)
        try:
            time.sleep(1.0)
            killed = time.monotonic()
            us_east.set_fault("use-1", Fault(kind))
            ejected = wait_for(lambda: outlier.ejected("use-1", time.monotonic()), 5.0)
            time.sleep(0.5)
            us_east.set_fault("use-1", Fault())
            back = wait_for(lambda: "use-1" not in outlier.ejected_names(), 10.0)
            ramp = outlier.ramp("use-1", time.monotonic(), SLOW_START_S, 0.1)
            time.sleep(SLOW_START_S + 1.5)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        metrics = httpx.get(gw.origin + "/metrics").text
    assert ejected - killed < 1.0, f"ejected {ejected - killed:.2f} s after the kill"
    unstarted = [s for s in seen if s.error is not None and s.first is None]
    assert not unstarted, (
        f"{len(unstarted)} requests failed before their first token: {unstarted[:3]}"
    )
    assert 'trafficmgr_gateway_retries_total{reason="timeout"}' not in metrics  # nothing hung
    assert "trafficmgr_gateway_retries_total" in metrics  # the kill did hit requests in flight
    assert ramp < 0.5  # back, at a fraction of its share
    early = [s.endpoint for s in seen if back <= s.started < back + 1.0]
    late = [s.endpoint for s in seen if s.started >= back + SLOW_START_S]
    assert late.count("use-1") > 0
    assert early.count("use-1") / max(1, len(early)) < late.count("use-1") / max(1, len(late))
