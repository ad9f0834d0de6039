"""The import direction of the product code, and the walk that checks it.

Each product module belongs to a unit (a package per concept, or a top-level module) and each
unit to a layer. Imports run downwards only:

    entry points → regions.api → features → configuration → infrastructure
        → harness → processes → libraries → runtime → engine

- a module may import its own unit, or any unit of a lower layer;
- the engine is its core, ``trafficmgr.routing`` (pure decisions), which imports nothing but
  itself and the standard library, and the units that read and write its values
  (``trafficmgr.contracts``, ``trafficmgr.fleetfile``, ``trafficmgr.geoip``), which import
  nothing of the product but the core;
- the runtime (``trafficmgr.runtime``: environment, heap, process helpers) imports no unit;
- libraries (the request-path core, the simulator) never import each other;
- processes (DNS server, gateway, endpoint picker, simulated server, agent) never import a
  sibling process: what two of them share lives in a library, the runtime or the engine;
- the harness (the testing package: ports, the local deployments' launchers) is imported only by
  the benchmarks (and the test suite), never by the product;
- features (``loop``, ``decisions``, ``drills``, ``alerts``) and configuration (``access``,
  ``fleet``) never import a sibling of their own layer: what two of them share lives lower down;
- everything below infrastructure runs without the Django app: it never imports ``regions``,
  ``dashboard`` or Django's settings modules (they are all higher);
- neither the product nor the benchmarks (``bench/``) import the test suite (``tests``): what
  a benchmark shares with the tests lives in the harness;
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

(ENGINE, RUNTIME, LIBRARY, PROCESS, HARNESS, INFRA, CONFIG, FEATURE, API, ENTRY) = range(10)
LAYER_NAMES = (
    "engine",
    "runtime",
    "library",
    "process",
    "harness",
    "infrastructure",
    "configuration",
    "feature",
    "api",
    "entry point",
)
# Layers whose units may import each other (without cycles); the others' siblings may not.
OPEN_LAYERS = {HARNESS, INFRA, ENTRY}
# The engine's core: the engine's other units may import it, and it imports nothing but itself
# and the standard library.
ENGINE_CORE = "trafficmgr.routing"
# Who may import the harness besides the harness itself (and the test suite, not walked here).
HARNESS_USERS = {"bench"}

# Longest prefix wins. Everything under regions/ and dashboard/ must be listed.
UNITS: dict[str, int] = {
    # the engine: pure decisions (the core), the cross-process contract, the fleet file, and
    # the GeoIP reader that turns an address into the engine's ClientLocation
    "trafficmgr.routing": ENGINE,
    "trafficmgr.contracts": ENGINE,
    "trafficmgr.fleetfile": ENGINE,
    "trafficmgr.geoip": ENGINE,
    # what a serving process needs of its host
    "trafficmgr.runtime": RUNTIME,
    # libraries the processes and the app build on
    "trafficmgr.requestpath": LIBRARY,
    "trafficmgr.sim": LIBRARY,
    # the processes that run without the Django app
    "trafficmgr.dns": PROCESS,
    "trafficmgr.gateway": PROCESS,
    "trafficmgr.epp": PROCESS,
    "trafficmgr.simserver": PROCESS,
    "agents": PROCESS,
    # what starts deployments and fixtures for the tests and the benchmarks
    "trafficmgr.testing": HARNESS,
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
    "regions.demo": ENTRY,
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
STANDALONE = {u for u, layer in UNITS.items() if layer < INFRA}


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
        why = _against(unit_of(i.source), unit_of(i.target))
        if why:
            out.append(f"{i.source}:{i.line}: {why}")
    return sorted(set(out))  # one line per import statement, however many names it takes


def _against(su: str, tu: str) -> str | None:
    """Why unit ``su`` may not import unit ``tu``, or None when it may."""
    sl, tl = UNITS[su], UNITS[tu]
    if su == tu:
        return None
    if su == ENGINE_CORE:
        return f"the engine's core {su} imports {tu}"
    if tl == HARNESS and sl != HARNESS and su not in HARNESS_USERS:
        return f"{LAYER_NAMES[sl]} {su} imports the harness {tu}"
    if tl < sl or (tl == sl and (sl in OPEN_LAYERS or tu == ENGINE_CORE)):
        return None
    if tl == sl:
        return f"{LAYER_NAMES[sl]} {su} imports its sibling {tu}"
    return f"{LAYER_NAMES[sl]} {su} imports {LAYER_NAMES[tl]} {tu}"


def foreign_imports(units: set[str], allowed: frozenset[str]) -> list[str]:
    """Return every import by a module of ``units`` of a top-level name not in ``allowed``.

    Product modules count by their unit (``trafficmgr.routing``), anything else by its first
    name (``django``); the standard library is always allowed.
    """
    known = modules()
    out = []
    for module, path in known.items():
        if unit_of(module) not in units:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                target = _resolve(name, known)
                what = unit_of(target) if target else name.split(".")[0]
                if what not in allowed and what not in sys.stdlib_module_names:
                    out.append(f"{module}:{node.lineno}: {unit_of(module)} imports {name}")
    return sorted(set(out))


# The engine's core imports nothing but itself and the standard library.
CORE_ALLOWED = frozenset({ENGINE_CORE})
# What runs without the Django app imports none of its frameworks.
DJANGO_WORLD = ("django", "rest_framework", "channels", "daphne", "celery", "corsheaders")


def django_imports() -> list[str]:
    """Return every import of the Django app or its frameworks by a unit that runs without it.

    Code kept in a string (``manage.py shell -c CODE``) counts: running the app's code from a
    string is importing it.
    """
    known = modules()
    out = []
    for module, path in known.items():
        if unit_of(module) not in STANDALONE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            for lineno, name in _imported_names(node):
                if name.split(".")[0] in (*DJANGO_WORLD, "regions", "dashboard"):
                    out.append(f"{module}:{lineno}: {unit_of(module)} imports {name}")
    return sorted(set(out))


def _imported_names(node: ast.AST) -> list[tuple[int, str]]:
    """Return the absolute imports ``node`` makes, or the code in it makes when it is a string."""
    if isinstance(node, ast.Import):
        return [(node.lineno, a.name) for a in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return [(node.lineno, node.module)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
        try:
            code = ast.parse(node.value)
        except SyntaxError:
            return []
        return [(node.lineno, n) for inner in ast.walk(code) for _, n in _imported_names(inner)]
    return []


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
    problems = [
        *direction_violations(found),
        *foreign_imports({ENGINE_CORE}, CORE_ALLOWED),
        *django_imports(),
    ]
    loops = cycles(found)
    for p in problems:
        print("against the direction:", p)
    for c in loops:
        print("cycle:", " ↔ ".join(c))
    print(f"{len(found)} imports, {len(problems)} against the direction, {len(loops)} cycles")
    return len(problems) + len(loops)


if __name__ == "__main__":
    raise SystemExit(1 if report() else 0)
