"""The runtime image and the installed package leave the testing package out.

``trafficmgr/testing`` (free ports, the local deployments' launchers) is for the tests and the
benchmarks, which run it from a checkout: the Docker build context drops it (.dockerignore),
so no COPY of the Dockerfile can ship it, and setuptools' package list excludes it.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, find_packages

ROOT = Path(__file__).resolve().parents[2]
TESTING_FILES = ("trafficmgr/testing/__init__.py", "trafficmgr/testing/topology/cluster.py")
PRODUCT_FILES = ("trafficmgr/routing/picker.py", "trafficmgr/gateway/app.py", "manage.py")


def ignored(path: str, patterns: list[str]) -> bool:
    """Say whether the build context drops ``path``: the last matching pattern decides.

    A pattern matches the path or one of its parent directories, as Docker's does.
    """
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    dropped = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        bare = pattern.removeprefix("!").strip("/")
        if any(fnmatch.fnmatchcase(c, bare) for c in candidates):
            dropped = not negated
    return dropped


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_build_context_drops_the_testing_package_and_keeps_the_product() -> None:
    patterns = dockerignore()
    for path in TESTING_FILES:
        assert (ROOT / path).exists(), path
        assert ignored(path, patterns), f".dockerignore lets {path} into the image"
    for path in PRODUCT_FILES:
        assert not ignored(path, patterns), f".dockerignore drops {path} the image needs"


def test_the_dockerfile_copies_only_from_the_context_or_the_compiled_stage() -> None:
    # so .dockerignore is the one gate: a COPY from another image or a URL would bypass it
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            sources = [w for w in words[1:-1] if not w.startswith("--")]
            assert all("://" not in s for s in sources), line
            flags = [w for w in words[1:] if w.startswith("--from=")]
            assert flags in ([], ["--from=compiled"]), line
        assert words[:1] != ["ADD"], f"ADD bypasses what this test checks: {line}"


def test_the_installed_package_list_excludes_the_testing_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    include, exclude = find.get("include", ["*"]), find.get("exclude", [])
    finder = find_namespace_packages if find.get("namespaces", True) else find_packages
    packages = set(finder(where=str(ROOT), include=include, exclude=exclude))
    assert "trafficmgr.routing" in packages and "trafficmgr.gateway" in packages
    assert not {p for p in packages if p.split(".")[:2] == ["trafficmgr", "testing"]}
