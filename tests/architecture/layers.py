"""The import direction of the product code, and the walk that checks it.

Each product module belongs to a unit (a package per concept, or a top-level module) and each
unit to a layer. Imports run downwards only:

    entry points → regions.api → features → configuration → infrastructure → engine

- a module may import its own unit, or any unit of a lower layer;
- features (``loop``, ``decisions``, ``drills``, ``alerts``) and configuration (``access``,
  ``fleet``) never import a sibling of their own layer: what two of them share lives lower down;
- the engine and the standalone processes (DNS server, simulator, simulated server, gateway,
  endpoint picker, agent, the local deployments' launchers) never import ``regions`` or
  ``dashboard``;
- neither the product nor the benchmarks (``bench/``) import the test suite (``tests``): what
  a benchmark shares with the tests lives in the product (``trafficmgr.topology``);
- no import cycle between modules, counting imports inside functions (hiding one there is
  still a cycle).

``python -m tests.architecture.layers`` prints every unit with its layer, modules and lines,
then any violation; the tests in this package fail on any violation.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("regions", "dashboard", "trafficmgr", "agents", "bench")
# Imported by none of SOURCES: the test suite.
TESTS = "tests"

ENGINE, INFRA, CONFIG, FEATURE, API, ENTRY = range(6)
LAYER_NAMES = ("engine", "infrastructure", "configuration", "feature", "api", "entry point")
# Layers whose units may import each other (without cycles); the others' siblings may not.
OPEN_LAYERS = {ENGINE, INFRA, ENTRY}

# Longest prefix wins. Everything under regions/ and dashboard/ must be listed.
UNITS: dict[str, int] = {
    # the engine, the shared contracts and the processes that run without the Django app
    "trafficmgr.routing": ENGINE,
    "trafficmgr.contracts": ENGINE,
    "trafficmgr.fleetfile": ENGINE,
    "trafficmgr.runtime": ENGINE,
    "trafficmgr.dns": ENGINE,
    "trafficmgr.sim": ENGINE,
    "trafficmgr.simserver": ENGINE,
    "trafficmgr.requestpath": ENGINE,
    "trafficmgr.gateway": ENGINE,
    "trafficmgr.epp": ENGINE,
    "trafficmgr.topology": ENGINE,
    "agents": ENGINE,
    # infrastructure of the app
    "regions.models": INFRA,
    "regions.errors": INFRA,
    "regions.conf": INFRA,
    "regions.validation": INFRA,
    "regions.metrics": INFRA,
    "regions.hotstate": INFRA,
    "regions.audit": INFRA,
    "regions.migrations": INFRA,
    # configuration
    "regions.access": CONFIG,
    "regions.fleet": CONFIG,
    # features
    "regions.loop": FEATURE,
    "regions.decisions": FEATURE,
    "regions.drills": FEATURE,
    "regions.alerts": FEATURE,
    # the HTTP API
    "regions.api": API,
    # entry points: Django and Celery wiring, commands, the dashboard
    "regions": ENTRY,
    "regions.admin": ENTRY,
    "regions.apps": ENTRY,
    "regions.caches": ENTRY,
    "regions.checks": ENTRY,
    "regions.demotraffic": ENTRY,
    "regions.embedded": ENTRY,
    "regions.health": ENTRY,
    "regions.management": ENTRY,
    "regions.middleware": ENTRY,
    "regions.tasks": ENTRY,
    "regions.urls": ENTRY,
    "dashboard": ENTRY,
    "trafficmgr": ENTRY,
    "trafficmgr.asgi": ENTRY,
    "trafficmgr.celery": ENTRY,
    "trafficmgr.settings": ENTRY,
    "trafficmgr.urls": ENTRY,
    # the benchmarks drive everything and nothing imports them
    "bench": ENTRY,
}
# Units that must not import the Django app at all (they run in processes without it).
STANDALONE = {u for u, layer in UNITS.items() if layer == ENGINE}


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # importing module
    target: str  # imported product module
    line: int
    in_function: bool


def modules() -> dict[str, Path]:
    """Return every product module by dotted name."""
    out: dict[str, Path] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def unit_of(module: str) -> str:
    """Return the unit a module belongs to (the longest listed prefix)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in UNITS:
            return prefix
    raise KeyError(f"{module}: no unit lists it; add it to tests/architecture/layers.py UNITS")


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[Import]:
    """Yield the product modules ``module`` imports, anywhere in its body."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    functions: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        for name in names:
            target = _resolve(name, known)
            if target is None and name.split(".")[0] == TESTS:
                target = name  # not a product module, but an import to report
            if target is not None and target != module:
                yield Import(module, target, node.lineno, id(node) in functions)


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in known:
            return candidate
    return None


def all_imports() -> list[Import]:
    known = modules()
    return [i for m, p in known.items() for i in imports(m, p, known)]


def direction_violations(found: list[Import]) -> list[str]:
    """Return every import against the direction, as ``file:line: why``."""
    out = []
    for i in found:
        if i.target.split(".")[0] == TESTS:
            out.append(
                f"{i.source}:{i.line}: {unit_of(i.source)} imports the test suite {i.target}"
            )
            continue
        su, tu = unit_of(i.source), unit_of(i.target)
        sl, tl = UNITS[su], UNITS[tu]
        if su == tu or tl < sl or (tl == sl and sl in OPEN_LAYERS):
            if su in STANDALONE and tu.split(".")[0] in ("regions", "dashboard"):
                pass  # unreachable: those are higher layers, reported below
            continue
        why = (
            f"{LAYER_NAMES[sl]} {su} imports its sibling {tu}"
            if tl == sl
            else f"{LAYER_NAMES[sl]} {su} imports {LAYER_NAMES[tl]} {tu}"
        )
        out.append(f"{i.source}:{i.line}: {why}")
    return sorted(set(out))  # one line per import statement, however many names it takes


def cycles(found: list[Import]) -> list[list[str]]:
    """Return the module import cycles (strongly connected components of size > 1)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in found:
        graph[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def report() -> int:
    """Print units, layers and sizes, then violations; return the number of problems."""
    known = modules()
    by_unit: dict[str, list[str]] = defaultdict(list)
    for m in known:
        by_unit[unit_of(m)].append(m)
    for layer in reversed(range(len(LAYER_NAMES))):
        print(f"{LAYER_NAMES[layer]}:")
        for unit in sorted(u for u in by_unit if UNITS[u] == layer):
            lines = sum(len(known[m].read_text().splitlines()) for m in by_unit[unit])
            print(f"  {unit:32} {len(by_unit[unit]):3} modules {lines:6} lines")
    found = all_imports()
    problems = direction_violations(found)
    loops = cycles(found)
    for p in problems:
        print("against the direction:", p)
    for c in loops:
        print("cycle:", " ↔ ".join(c))
    print(f"{len(found)} imports, {len(problems)} against the direction, {len(loops)} cycles")
    return len(problems) + len(loops)


if __name__ == "__main__":
    raise SystemExit(1 if report() else 0)
