"""The oracle's forecast equals what the server then does when nothing else arrives."""

from __future__ import annotations

import math

import pytest

from trafficmgr.routing.types import ClientLocation, Endpoint, GpuProfile, Request
from trafficmgr.sim.policies import forecast_completion
from trafficmgr.sim.server import EndpointServer, Job

H100 = GpuProfile("H100", 12000, 2400, 64)


def _run_until(server: EndpointServer, t: float) -> None:
    while server.next_event() <= t:
        server.step(server.next_event())
    server.advance(t)


def _run_to_completion(server: EndpointServer, rid: int) -> float:
    while True:
        when = server.next_event()
        assert not math.isinf(when)
        _, finished = server.step(when)
        if any(j.rid == rid for j in finished):
            return when


@pytest.mark.parametrize(
    "jobs",
    [
        [],
        [(5000, 300)],
        [(20000, 10), (300, 800), (4000, 1)],
        [(100, 50)] * 40,
    ],
)
def test_forecast_matches_the_simulated_completion(jobs: list[tuple[int, int]]) -> None:
    server = EndpointServer(0, Endpoint("e", "r", "a:1", "H100", 1, ("m",)), H100, False)
    for k, (tokens, out) in enumerate(jobs):
        _run_until(server, 0.01 * k)  # some progress between arrivals
        server.submit(Job(k, tokens, out, 100.0), 0.01 * k)
    now = 0.01 * len(jobs)
    _run_until(server, now)  # the simulation has handled every earlier event
    request = Request("m", ClientLocation(), 2500, 4096)
    forecast = forecast_completion(server, request, 120, now)
    server.submit(Job(999, 2500, 120, 100.0), now)
    assert _run_to_completion(server, 999) == pytest.approx(forecast, rel=1e-9)
