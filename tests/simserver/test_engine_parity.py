"""The live engine computes what the discrete-event simulation computes, however it is synced.

``LiveEndpoint`` steps ``EndpointServer`` through due events at their own model times, so
first-token and end times must not depend on when (or how often) the event loop gets to
call ``sync``. Checked against a plain event-by-event drive of a second ``EndpointServer``,
with a clock the test sets by hand.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from trafficmgr.routing.prompt import BLOCK_TOKENS
from trafficmgr.routing.types import Endpoint, GpuProfile
from trafficmgr.sim.server import EndpointServer, Job
from trafficmgr.simserver.engine import Clock, LiveEndpoint, hash_salt

PROFILE = GpuProfile("T1", 1000.0, 100.0, 8)
ENDPOINT = Endpoint("e", "r", "10.0.0.1:1", "T1", 1, ("m",))
Arrival = tuple[float, int, int, tuple[int, ...]]  # time, input, output, prefix hashes


class HandClock(Clock):
    def __init__(self) -> None:
        super().__init__(1.0)
        self.t = 0.0

    def now(self) -> float:
        return self.t


def workload(seed: int, n: int = 40) -> list[Arrival]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(4.0)
        blocks = rng.randint(0, 3)
        hashes = tuple(rng.choice((1, 2)) * 1000 + b for b in range(blocks))  # shared prefixes
        prompt = max(1, blocks * BLOCK_TOKENS - rng.randint(0, 200))
        out.append((t, prompt, rng.randint(1, 120), hashes))
    return out


def reference(arrivals: list[Arrival]) -> list[tuple[float, float]]:
    """First-token and end times, event by event, as the DES drives the server."""
    server = EndpointServer(0, ENDPOINT, PROFILE)
    salt = hash_salt("m")
    times: dict[int, list[float]] = {}
    pending = list(enumerate(arrivals, start=1))
    while pending or server.next_event() < float("inf"):
        event = server.next_event()
        if pending and pending[0][1][0] < event:
            rid, (t, size, output, hashes) = pending.pop(0)
            salted = tuple(h ^ salt for h in hashes)
            server.submit(Job(rid, size, output, float(output), salted), t)
            continue
        first, finished = server.step(event)
        for job in first:
            times[job.rid] = [event, -1.0]
        for job in finished:
            times[job.rid][1] = event
    return [(times[rid][0], times[rid][1]) for rid in range(1, len(arrivals) + 1)]


async def live(arrivals: list[Arrival], syncs_between: int, seed: int) -> list[tuple[float, float]]:
    clock = HandClock()
    endpoint = LiveEndpoint(0, ENDPOINT, PROFILE, clock, 131072)
    rng = random.Random(seed)
    flights = []
    for t, size, output, hashes in arrivals:
        for _ in range(syncs_between):  # the loop wakes at arbitrary moments in between
            clock.t = rng.uniform(clock.t, t)
            endpoint.sync()
        clock.t = t
        flights.append(endpoint.submit("m", size, output, hashes, "length"))
    clock.t = 1e6
    endpoint.sync()  # one late wake-up catches up with everything
    endpoint.close()
    return [(f.first.result(), f.done.result()) for f in flights]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("syncs_between", [0, 1, 7])
def test_live_engine_matches_the_event_by_event_drive(seed: int, syncs_between: int) -> None:
    arrivals = workload(seed)
    expected = reference(arrivals)
    got = asyncio.run(live(arrivals, syncs_between, seed))
    flat = [t for pair in got for t in pair]
    assert flat == pytest.approx([t for pair in expected for t in pair], rel=1e-9, abs=1e-9)
    pairs = zip(expected[1:], expected[:-1], strict=True)
    overlapping = sum(first < prev_end for (first, _), (_, prev_end) in pairs)
    assert overlapping > 10  # requests really overlapped: batching and queueing were exercised


def test_cancel_frees_the_slot_and_the_kv_cache() -> None:
    server = EndpointServer(0, ENDPOINT, PROFILE)
    jobs = [Job(i, 100, 50, 50.0) for i in range(10)]  # 8 slots: two wait
    for job in jobs:
        server.submit(job, 0.0)
    assert len(server.waiting) == 2
    kv = server.kv_used
    assert server.cancel(jobs[3], 0.0)  # admitted, prefilling
    assert server.kv_used == kv  # the first waiting request took its room
    assert len(server.waiting) == 1
    assert server.cancel(jobs[9], 0.0)  # waiting
    assert not server.waiting and server.waiting_input == 0
    first, finished = server.step(server.next_event())
    assert first == [jobs[0]] and not finished
    assert server.cancel(jobs[0], server.t)  # decoding
    assert all(j is not jobs[0] for _, _, j in server.decoding)
    assert not server.cancel(jobs[0], server.t)  # not there any more
    while server.next_event() < float("inf"):
        server.step(server.next_event())
    assert server.kv_used == 0 and server.prefill_backlog == pytest.approx(0.0, abs=1e-6)
