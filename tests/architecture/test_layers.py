"""The import direction holds and no import cycle exists (see ``layers.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.architecture import layers


def test_every_product_module_belongs_to_a_unit() -> None:
    for module in layers.modules():
        layers.unit_of(module)  # raises, naming the module, when none lists it


def test_no_import_runs_against_the_direction() -> None:
    found = layers.all_imports()
    assert len(found) > 500  # the walk really read the product's imports
    assert layers.direction_violations(found) == []


def test_no_import_cycle() -> None:
    assert layers.cycles(layers.all_imports()) == []


def test_the_walk_sees_an_import_against_the_direction() -> None:
    wrong = layers.Import("regions.hotstate.memory", "regions.loop.control", 1, True)
    sibling = layers.Import("regions.drills.runner", "regions.loop.control", 2, False)
    engine = layers.Import("trafficmgr.dns.server", "regions.fleet.snapshot", 3, True)
    problems = layers.direction_violations([wrong, sibling, engine])
    assert len(problems) == 3
    assert "imports its sibling regions.loop" in problems[0] or any(
        "sibling" in p for p in problems
    )


def test_the_engine_core_imports_nothing_but_itself_and_the_standard_library() -> None:
    assert layers.foreign_imports({layers.ENGINE_CORE}, layers.CORE_ALLOWED) == []


def test_nothing_that_runs_without_the_django_app_imports_its_frameworks() -> None:
    assert layers.django_imports() == []


def test_the_lower_layers_are_closed() -> None:
    def problem(source: str, target: str) -> list[str]:
        return layers.direction_violations([layers.Import(source, target, 1, False)])

    # the engine imports no library, process or harness, and its core nothing of the product
    assert problem("trafficmgr.routing.picker", "trafficmgr.gateway.app")
    assert problem("trafficmgr.routing.table", "trafficmgr.fleetfile.read")
    assert problem("trafficmgr.routing.table", "trafficmgr.runtime.env")
    # the engine's other units import its core, not each other
    assert not problem("trafficmgr.contracts", "trafficmgr.routing.types")
    assert problem("trafficmgr.contracts", "trafficmgr.fleetfile.read")
    # a library imports no process and no sibling library
    assert problem("trafficmgr.requestpath.core", "trafficmgr.epp.decision")
    assert problem("trafficmgr.sim.run", "trafficmgr.requestpath.core")
    # a process imports libraries, the runtime and the engine, never a sibling process
    assert not problem("trafficmgr.simserver.engine", "trafficmgr.sim.des")
    assert not problem("trafficmgr.gateway.metrics", "trafficmgr.runtime.procs")
    assert problem("trafficmgr.gateway.app", "trafficmgr.epp.decision")
    assert problem("agents.push", "trafficmgr.dns.server")
    # only the benchmarks (and the tests) import the harness
    assert not problem("bench.dashboard_ws", "trafficmgr.testing.topology.liveserver")
    assert problem("regions.management.commands.demo", "trafficmgr.testing.topology.cluster")
    assert problem("trafficmgr.gateway.app", "trafficmgr.testing.topology.cluster")


def test_the_walk_sees_the_engine_core_import_a_package() -> None:
    found = [
        *layers.foreign_imports({"trafficmgr.routing"}, frozenset()),
        *layers.foreign_imports({"trafficmgr.fleetfile"}, layers.CORE_ALLOWED),
    ]
    assert any("trafficmgr.routing imports trafficmgr.routing." in p for p in found)
    assert any("trafficmgr.fleetfile imports yaml" in p for p in found)


def test_the_walk_sees_a_cycle() -> None:
    a = layers.Import("regions.fleet.plan", "regions.fleet.writer", 1, False)
    b = layers.Import("regions.fleet.writer", "regions.fleet.plan", 2, True)
    assert layers.cycles([a, b]) == [["regions.fleet.plan", "regions.fleet.writer"]]


def test_the_walk_sees_a_benchmark_importing_the_tests(tmp_path: Path) -> None:
    bench = tmp_path / "dashboard_ws.py"
    bench.write_text("def main():\n    from tests.e2e.cluster import Cluster\n    import tests\n")
    found = list(layers.imports("bench.dashboard_ws", bench, layers.modules()))
    assert [(i.target, i.in_function) for i in found] == [
        ("tests.e2e.cluster", True),
        ("tests", True),
    ]
    problems = layers.direction_violations(found)
    assert problems == [
        "bench.dashboard_ws:2: bench imports the test suite tests.e2e.cluster",
        "bench.dashboard_ws:3: bench imports the test suite tests",
    ]
