"""Simulated gateways sharing their state know what production's shared state tells them.

A gateway sees another's requests and prompt blocks only after a publish and the round trip
to read it (never at once, never by magic), merged by the production merge
(``routing.sharedstate``); isolated gateways still see nothing of each other's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.sim.test_gateway_view import by_name, heartbeat
from trafficmgr.routing.types import Fleet
from trafficmgr.sim.control import EPOCH, GlobalLevel
from trafficmgr.sim.des import build_servers
from trafficmgr.sim.gateways import GatewayViews, SharedModel
from trafficmgr.sim.run import simulate
from trafficmgr.sim.server import Job
from trafficmgr.sim.traces import Trace


def shared_world(fleet: Fleet, shared: SharedModel | None) -> tuple[Any, Any, GatewayViews]:
    servers, by_region = build_servers(fleet)
    views = GatewayViews(fleet, by_region, 2, EPOCH, 0, shared)
    heartbeat(GlobalLevel(fleet, 0), views, servers, 0.0)
    return servers, by_region, views


def test_another_gateway_requests_count_after_publish_and_round_trip(sim_world: Fleet) -> None:
    _, by_region, views = shared_world(sim_world, SharedModel())
    euw1 = by_region[0][0]
    for rid in range(30):
        euw1.submit(Job(rid, 4000, 400, 120.0, gateway=0), 0.1)
    assert by_name(views.loads(1, 0, frozenset(), (), 0.1))["euw-1"].running == 0
    views.publish(0.1)
    assert by_name(views.loads(1, 0, frozenset(), (), 0.1))["euw-1"].running == 0  # in transit
    views.install(0.1005)
    theirs = by_name(views.loads(1, 0, frozenset(), (), 0.1005))["euw-1"]
    assert theirs.running + theirs.waiting == 30
    assert theirs.outstanding_prefill_tokens == 30 * 4000
    mine = by_name(views.loads(0, 0, frozenset(), (), 0.1005))["euw-1"]
    assert mine.running + mine.waiting == 30  # its own, not counted twice


def test_prompt_blocks_sent_by_one_gateway_reach_the_others(sim_world: Fleet) -> None:
    _, by_region, views = shared_world(sim_world, SharedModel())
    views.sent(0, by_region[0][0].index, (11, 12, 13))
    views.publish(0.1)
    views.install(0.1005)
    held = by_name(views.loads(1, 0, frozenset(), (11, 12, 99), 0.2))["euw-1"].cached_prefixes
    assert held == {11, 12}


def test_published_figures_older_than_the_bound_are_not_merged(sim_world: Fleet) -> None:
    _, by_region, views = shared_world(sim_world, SharedModel(max_staleness_s=0.05))
    by_region[0][0].submit(Job(1, 4000, 400, 120.0, gateway=0), 0.1)
    views.publish(0.1)
    views.install(0.2)  # read late: older than the bound
    assert by_name(views.loads(1, 0, frozenset(), (), 0.2))["euw-1"].running == 0


def test_the_run_says_it_was_shared(sim_world: Fleet, steady_trace: Callable[..., Trace]) -> None:
    trace = steady_trace(rate=10, seconds=5)
    doc = simulate(sim_world, trace, ["ai_aware"], gateways=2, shared=SharedModel())
    assert doc.document["trace"]["view"]["shared"]["interval_s"] == 0.005
    assert doc.document["policies"]["ai_aware"]["completed"] > 0
