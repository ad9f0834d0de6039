"""Regions are chosen exactly as ``/route`` chooses them, and residency is never loosened."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tests.gateway.world import EU_IP, EU_REGIONS, US_IP, locate
from tests.requestpath.conftest import ask, plan
from trafficmgr.requestpath import Outcome, Refusal
from trafficmgr.routing.decision import region_candidates
from trafficmgr.routing.table import static_table
from trafficmgr.routing.types import AdminState, Fleet, Request


def test_plan_region_is_the_engines_first_candidate(fleet: Fleet, make_core: Callable) -> None:
    core, _ = make_core()
    table = static_table(fleet, 0.0)
    for ip in (EU_IP, US_IP, "203.0.113.9", None):
        got = plan(core.decide(ask(client_ip=ip)))
        request = Request("m1", locate(ip) if ip else locate(""), 2, 16)
        expected = region_candidates(fleet, table, request, ip).regions[0].region
        if ip is not None:  # a known client is drawn deterministically, as /route draws it
            assert got.region == expected
        core.finished(got.handle, None, Outcome.OK)


def test_eu_client_targets_stay_in_the_eu(make_core: Callable) -> None:
    core, _ = make_core(max_targets=10)
    for _ in range(50):
        got = plan(core.decide(ask(client_ip=EU_IP)))
        assert {t.region for t in got.targets} <= set(EU_REGIONS)
        assert len(got.targets) == 3  # every EU endpoint serving m1, none elsewhere
        core.finished(got.handle, None, Outcome.OK)


def test_eu_client_with_every_eu_endpoint_drained_is_refused_not_sent_abroad(
    make_core: Callable,
) -> None:
    core, _ = make_core()
    for name in ("euw-1", "euw-2", "euc-1"):
        core.drain(name)
    refused = core.decide(ask(client_ip=EU_IP))
    assert isinstance(refused, Refusal) and refused.status == 503
    assert refused.retry_after_s and refused.retry_after_s >= 1
    assert plan(core.decide(ask(client_ip=US_IP))).region == "us-east"


def test_eu_client_with_eu_disabled_in_the_fleet_gets_503(
    fleet: Fleet, make_core: Callable
) -> None:
    regions = tuple(
        replace(r, admin_state=AdminState.DISABLED) if r.name in EU_REGIONS else r
        for r in fleet.regions
    )
    core, _ = make_core(replace(fleet, regions=regions))
    refused = core.decide(ask(client_ip=EU_IP))
    assert isinstance(refused, Refusal) and refused.status == 503


def test_region_restricted_core_refuses_clients_its_region_may_not_serve(
    make_core: Callable,
) -> None:
    core, _ = make_core(region="us-east")
    assert plan(core.decide(ask(client_ip=US_IP))).region == "us-east"
    refused = core.decide(ask(client_ip=EU_IP))
    assert isinstance(refused, Refusal) and refused.code == "no_allowed_region"
