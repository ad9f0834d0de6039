"""The simulated gateways know only what production gives a gateway process.

Each of ``--gateways N`` processes sees its own requests in flight (counted from its pick, as
its ledger counts them) and the heartbeats of the last control-loop tick, never another
process's requests before a heartbeat reports them, nor a server's live queue between ticks.
The omniscient view is still there, named as the upper bound it is.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trafficmgr.routing.types import ClientLocation, Fleet, Request
from trafficmgr.sim.cli import run_cli
from trafficmgr.sim.control import EPOCH, GlobalLevel
from trafficmgr.sim.des import build_servers
from trafficmgr.sim.gateways import GatewayViews
from trafficmgr.sim.policies import EnginePolicy
from trafficmgr.sim.run import simulate
from trafficmgr.sim.server import Job
from trafficmgr.sim.traces import Trace

REQUEST = Request("small", ClientLocation("DE", "EU"), 1000, 100)


def eu_west(fleet: Fleet) -> tuple[Any, Any, GatewayViews, GlobalLevel]:
    servers, by_region = build_servers(fleet)
    views = GatewayViews(fleet, by_region, 2, EPOCH)
    level = GlobalLevel(fleet, 0)
    return servers, by_region, views, level


def heartbeat(level: GlobalLevel, views: GatewayViews, servers: Any, now: float) -> None:
    for s in servers:
        s.advance(now)
        level.report(s, 0.5, 0.0, now)
    level.tick(now)
    views.refresh(level.table, level.heartbeats, now)


def by_name(loads: tuple[Any, ...]) -> dict[str, Any]:
    return {load.endpoint.name: load for load in loads}


def test_a_gateway_sees_its_own_requests_at_once_and_others_only_by_heartbeat(
    sim_world: Fleet,
) -> None:
    servers, by_region, views, level = eu_west(sim_world)
    heartbeat(level, views, servers, 0.0)
    euw1 = by_region[0][0]
    for rid in range(300):  # gateway 0 sends a burst between two heartbeats
        euw1.submit(Job(rid, 4000, 400, 120.0, gateway=0), 0.1)
    mine = by_name(views.loads(0, 0, frozenset(), (), 0.2))["euw-1"]
    theirs = by_name(views.loads(1, 0, frozenset(), (), 0.2))["euw-1"]
    assert mine.running == 300 and mine.outstanding_prefill_tokens == 300 * 4000
    assert theirs.running == 0 and theirs.waiting == 0
    assert theirs.outstanding_prefill_tokens == theirs.outstanding_decode_tokens == 0.0
    heartbeat(level, views, servers, 1.0)  # the next heartbeat tells everyone
    in_flight = len(euw1.waiting) + len(euw1.prefill) + len(euw1.decoding)
    theirs = by_name(views.loads(1, 0, frozenset(), (), 1.1))["euw-1"]
    assert theirs.running + theirs.waiting == in_flight > 0
    assert theirs.waiting > 0 and theirs.outstanding_prefill_tokens > 0


def test_between_heartbeats_the_view_does_not_follow_the_server(sim_world: Fleet) -> None:
    servers, by_region, views, level = eu_west(sim_world)
    euw1 = by_region[0][0]
    for rid in range(100):
        euw1.submit(Job(rid, 2000, 50, 50.0, gateway=1), 0.0)
    heartbeat(level, views, servers, 0.0)
    before = by_name(views.loads(0, 0, frozenset(), (), 0.0))["euw-1"]
    for rid in range(100, 400):
        euw1.submit(Job(rid, 2000, 50, 50.0, gateway=1), 0.5)
    later = by_name(views.loads(0, 0, frozenset(), (), 0.9))["euw-1"]
    assert (later.running, later.waiting) == (before.running, before.waiting)


def test_prefix_blocks_are_what_the_gateway_sent_not_the_server_cache(sim_world: Fleet) -> None:
    servers, by_region, views, level = eu_west(sim_world)
    heartbeat(level, views, servers, 0.0)
    views.sent(0, by_region[0][0].index, (11, 12, 13))
    assert by_name(views.loads(0, 0, frozenset(), (11, 12, 99), 0.1))["euw-1"].cached_prefixes == {
        11,
        12,
    }
    assert not by_name(views.loads(1, 0, frozenset(), (11, 12), 0.1))["euw-1"].cached_prefixes


def test_requests_are_dealt_to_the_gateways_round_robin(
    sim_world: Fleet, steady_trace: Callable[..., Trace]
) -> None:
    from trafficmgr.sim.des import Simulation
    from trafficmgr.sim.workload import build_workload

    workload = build_workload(sim_world, steady_trace(rate=20, seconds=5), 0.5, seed=1)
    policy = EnginePolicy("ai_aware", 1)
    Simulation(sim_world, workload, policy, seed=1, gateways=4).run()
    assert {gateway for gateway, _ in policy.pickers} == {0, 1, 2, 3}


def test_the_document_says_which_view(sim_world: Fleet, steady_trace: Callable[..., Trace]) -> None:
    trace = steady_trace(rate=10, seconds=5)
    doc = simulate(sim_world, trace, ["ai_aware"], gateways=3).document
    assert doc["trace"]["view"] == {"kind": "gateways", "gateways": 3, "heartbeat_interval_s": 1}
    upper = simulate(sim_world, trace, ["ai_aware"], omniscient=True).document
    assert upper["trace"]["view"]["kind"] == "omniscient"
    assert "upper bound" in upper["trace"]["view"]["note"]


def test_the_command_line_takes_gateways_and_refuses_zero(
    tmp_path: Path, steady_trace: Callable[..., Trace]
) -> None:
    from tests.worlds import SIM as SIM_WORLD_YAML

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(SIM_WORLD_YAML)
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{k:02d}.0,1000,50\n" for k in range(40))
    )
    out = tmp_path / "out.json"
    argv = ["--fleet", str(fleet), "--trace", str(trace), "--policies", "ai_aware"]
    err = io.StringIO()
    assert run_cli([*argv, "--gateways", "4", "--json", str(out)], io.StringIO(), err) == 0
    assert json.loads(out.read_text())["trace"]["view"]["gateways"] == 4
    err = io.StringIO()
    assert run_cli([*argv, "--gateways", "0", "--json", str(out)], io.StringIO(), err) == 2
    assert "--gateways" in err.getvalue()


@pytest.mark.parametrize("gateways", [0, -2])
def test_no_gateway_is_an_error_naming_the_field(sim_world: Fleet, gateways: int) -> None:
    with pytest.raises(ValueError, match="gateways"):
        simulate(sim_world, Trace("<none>", "azure", ()), ["ai_aware"], gateways=gateways)
