"""``regions/api/`` is a package per feature over shared plumbing, and the features are closed.

Each feature package (``config``, ``fleet``, ``loop``, ``drills``, ``alerts``, and the ASGI
front ``fastfront``) imports the plumbing at the top of ``regions/api/`` and lower layers, never
another feature package; the plumbing imports no feature package. What two of them share
moves down into the plumbing.
"""

from __future__ import annotations

from tests.architecture import layers

API = "regions.api"


def feature_packages() -> set[str]:
    """Return the dotted names of the packages directly under ``regions/api/``."""
    root = layers.ROOT / "regions" / "api"
    return {f"{API}.{p.parent.name}" for p in root.glob("*/__init__.py")}


def feature_of(module: str, features: set[str]) -> str | None:
    """Return the feature package ``module`` belongs to; None for the shared plumbing."""
    return next((f for f in features if module == f or module.startswith(f + ".")), None)


def api_violations(found: list[layers.Import], features: set[str]) -> list[str]:
    """Name every import from one API package into another, or from the plumbing into one."""
    problems = []
    for imp in found:
        if not (imp.source.startswith(API + ".") and imp.target.startswith(API + ".")):
            continue
        source, target = feature_of(imp.source, features), feature_of(imp.target, features)
        if target is not None and source != target:
            where = source or "the API's shared plumbing"
            problems.append(f"{imp.source}:{imp.line} ({where}) imports {imp.target}")
    return problems


def test_the_api_is_a_package_per_feature() -> None:
    names = {f.removeprefix(API + ".") for f in feature_packages()}
    assert {"config", "fleet", "loop", "drills", "alerts", "fastfront"} <= names
    prefixed = [p.name for p in (layers.ROOT / "regions" / "api").glob("*_*.py")]
    assert [n for n in prefixed if n.split("_")[0] in names | {"drill", "alert", "silence"}] == []


def test_no_api_package_imports_another() -> None:
    assert api_violations(layers.all_imports(), feature_packages()) == []


def test_the_check_sees_a_sibling_and_a_plumbing_import() -> None:
    features = {f"{API}.loop", f"{API}.drills", f"{API}.fastfront"}
    sibling = layers.Import(f"{API}.drills.views", f"{API}.loop.views", 1, False)
    front = layers.Import(f"{API}.fastfront.front", f"{API}.loop.views", 2, True)
    plumbing = layers.Import(f"{API}.errors", f"{API}.loop.views", 3, True)
    own = layers.Import(f"{API}.loop.urls", f"{API}.loop.views", 4, False)
    shared = layers.Import(f"{API}.loop.views", f"{API}.parsers", 5, False)
    found = [sibling, front, plumbing, own, shared]
    assert len(api_violations(found, features)) == 3
