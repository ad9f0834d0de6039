"""Invariants of the engine over generated fleets, statuses and health histories."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trafficmgr.routing.countries import CENTROID_OF, CONTINENT_OF
from trafficmgr.routing.failover import RegionMachine, new_machine, step_machine
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.health import Observation, RegionHealth
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.table import compile_table, lookup, zone_location
from trafficmgr.routing.types import (
    AdminState,
    AllDown,
    ClientShare,
    Endpoint,
    FailoverPolicy,
    Fleet,
    GeoPoint,
    GpuProfile,
    Region,
    RegionState,
    RegionStatus,
    ResidencyMode,
    ResidencyRule,
    RoutingTable,
)

COUNTRIES = ("IE", "DE", "FR", "US", "CA", "BR", "IN", "SG", "JP", "AU", "ZA", "NA", "SA")
MODELS = ("m1", "m2", "m3")
PROFILES = {"H100": GpuProfile("H100", 12000, 2400, 64), "L4": GpuProfile("L4", 1500, 350, 16)}
PROPERTY = settings(max_examples=120, deadline=None)


@st.composite
def regions(draw: Any) -> tuple[Region, ...]:
    count = draw(st.integers(1, 6))
    out = []
    for i in range(count):
        name = f"r{i}"
        country = draw(st.sampled_from(COUNTRIES))
        endpoints = tuple(
            Endpoint(
                f"{name}-e{j}",
                name,
                f"10.0.{i}.{j + 1}:8000",
                draw(st.sampled_from(("H100", "L4", "X9"))),
                draw(st.integers(1, 8)),
                tuple(draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True))),
                admin_state=draw(st.sampled_from((AdminState.ACTIVE,) * 4 + (AdminState.DRAINED,))),
            )
            for j in range(draw(st.integers(0, 3)))
        )
        out.append(
            Region(
                name,
                country,
                CONTINENT_OF[country],
                GeoPoint(*CENTROID_OF[country]),
                ("192.0.2.1",),
                endpoints,
                priority=draw(st.integers(1, 3)),
                weight=draw(st.sampled_from((0.0, 0.5, 1.0, 1.0, 2.0))),
                admin_state=draw(
                    st.sampled_from(
                        (AdminState.ACTIVE,) * 5 + (AdminState.DRAINED, AdminState.DISABLED)
                    )
                ),
            )
        )
    return tuple(out)


@st.composite
def fleets(draw: Any) -> Fleet:
    regs = draw(regions())
    names = [r.name for r in regs]
    rules = tuple(
        ResidencyRule(
            f"rule{k}",
            frozenset(draw(st.lists(st.sampled_from(COUNTRIES), max_size=3))),
            frozenset(draw(st.lists(st.sampled_from(("EU", "NA", "AS", "AF")), max_size=2))),
            tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))),
            draw(st.sampled_from((ResidencyMode.STRICT, ResidencyMode.PREFERRED))),
        )
        for k in range(draw(st.integers(0, 3)))
    )
    policy = FailoverPolicy(
        all_down=draw(st.sampled_from(tuple(AllDown))),
        spillover_headroom=draw(st.sampled_from((0.0, 0.1, 0.3))),
        max_shift_per_tick=draw(st.sampled_from((0.1, 0.5, 1.0))),
    )
    clients = tuple(
        ClientShare(c, 0.1)
        for c in draw(st.lists(st.sampled_from(COUNTRIES), max_size=4, unique=True))
    )
    return Fleet("t.example.test", 10, PROFILES, regs, rules, policy, clients)


@st.composite
def statuses(draw: Any, fleet: Fleet) -> dict[str, RegionStatus]:
    out = {}
    for r in fleet.regions:
        if draw(st.booleans()) and draw(st.booleans()):
            continue  # no status: the compile falls back to configuration
        models = draw(
            st.dictionaries(st.sampled_from(MODELS), st.sampled_from((0.0, 500.0, 9000.0)))
        )
        out[r.name] = RegionStatus(
            state=draw(st.sampled_from(tuple(RegionState))),
            headroom=draw(st.floats(0, 1)),
            capacity=draw(st.sampled_from((0.0, 1000.0, 50_000.0))),
            reason="generated",
            ramp=draw(st.floats(0, 1)),
            models=models,
            demand=draw(st.one_of(st.none(), st.floats(0, 10))),
        )
    return out


def check_table(fleet: Fleet, table: RoutingTable) -> None:
    """Assert residency, no weight on down/drained regions, and exact sums, for every list."""
    states = {n: s.state for n, s in table.regions.items()}
    admin = {r.name: r.admin_state for r in fleet.regions}
    for zone, lists in table.zones.items():
        strict = allowed_regions(fleet, zone_location(zone)).strict_regions
        for model, entries in lists.items():
            units = [round(w.weight * 10_000) for w in entries]
            assert not entries or sum(units) == 10_000
            assert all(u > 0 for u in units)
            for w in entries:
                assert strict is None or w.region in strict, (zone, model, w)
                assert states[w.region] is not RegionState.DRAINED
                assert admin[w.region] is AdminState.ACTIVE
                if states[w.region] is RegionState.DOWN:
                    assert table.notes[zone][model].startswith("fail_open"), (zone, model, w)


@PROPERTY
@given(st.data())
def test_residency_drains_and_sums_hold_for_any_fleet(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    table = compile_table(fleet, data.draw(statuses(fleet)), 1000.0)
    check_table(fleet, table)
    for country in COUNTRIES:
        client = country_location(country)
        strict = allowed_regions(fleet, client).strict_regions
        for model in MODELS:
            for w in lookup(table, client, model):
                assert strict is None or w.region in strict, (country, model, w)


@PROPERTY
@given(st.data())
def test_shift_limit_never_breaks_the_invariants(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    previous = compile_table(fleet, data.draw(statuses(fleet)), 1000.0)
    table = compile_table(fleet, data.draw(statuses(fleet)), 1001.0, previous=previous)
    check_table(fleet, table)


@PROPERTY
@given(st.data(), st.lists(st.floats(0, 90), min_size=2, max_size=5))
def test_damped_spillover_over_many_ticks_never_breaks_the_invariants(
    data: st.DataObject, gaps: list[float]
) -> None:
    fleet = data.draw(fleets())
    now = 1000.0
    table = compile_table(fleet, data.draw(statuses(fleet)), now)
    for gap in gaps:
        now += gap
        table = compile_table(fleet, data.draw(statuses(fleet)), now, previous=table)
        check_table(fleet, table)


@PROPERTY
@given(st.data())
def test_same_inputs_give_the_same_table_and_version(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    given_statuses = data.draw(statuses(fleet))
    first = compile_table(fleet, given_statuses, 1000.0)
    second = compile_table(fleet, dict(given_statuses), 1000.0)
    assert first == second and first.version == second.version


def _health(obs: Observation) -> RegionHealth:
    return RegionHealth("r0", obs, 100.0, 100.0, 0.5, 1.0, f"generated {obs.value}")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.1, 3.0),
            st.sampled_from(
                (Observation.GOOD, Observation.DEGRADED, Observation.BAD, Observation.NONE)
            ),
        ),
        min_size=1,
        max_size=120,
    ),
    st.sampled_from((1.0, 5.0, 20.0)),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_alternating_health_changes_state_no_faster_than_hold_downs_allow(
    history: list[tuple[float, Observation]], hold_down: float, up: int, down: int
) -> None:
    policy = FailoverPolicy(
        hold_down_s=hold_down, up_threshold=up, down_threshold=down, slow_start_s=4.0
    )
    machine: RegionMachine = new_machine(0.0)
    now = 0.0
    changes = 0
    for gap, obs in history:
        now += gap
        machine, transition = step_machine("r0", machine, _health(obs), policy, now)
        changes += transition is not None
    assert changes <= 2 * (now / hold_down + 1) + 1
