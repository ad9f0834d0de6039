"""``bench/`` is packages by area run as modules: no top-level script, no ``sys.path`` edit.

A benchmark is ``python -m bench.<area>.<name>`` from the checkout's root, so its imports are
the package's (``from bench.gateway import procs``) and nothing rewrites the import path: an
edit of ``sys.path`` makes what a benchmark measures depend on where it was started from.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# at the top: the package, its shared helper, the README and the committed results
TOP_FILES = {"__init__.py", "suite.py", "README.md"}
TOP_DIRS_NOT_PACKAGES = {"results", "out", "__pycache__"}
# run by path in aiperf's own virtualenv (scripts/peers), whose packages .venv does not hold
OTHER_VENV = {"bench.gateway.aiperf_tokenizer"}


def _sources(bench: Path) -> list[Path]:
    skipped = ("results", "out", "__pycache__")
    return [
        p for p in sorted(bench.rglob("*.py")) if not set(p.relative_to(bench).parts) & set(skipped)
    ]


def top_level_problems(bench: Path) -> list[str]:
    """Name what sits at the top of ``bench`` besides the packages, README and results."""
    problems = []
    for entry in sorted(bench.iterdir()):
        if entry.is_dir():
            if entry.name not in TOP_DIRS_NOT_PACKAGES and not (entry / "__init__.py").is_file():
                problems.append(f"{entry.name}/ is not a package")
        elif entry.name not in TOP_FILES:
            problems.append(f"{entry.name}: a top-level script")
    problems += [
        f"{path.relative_to(bench)}: a package without __init__.py"
        for path in sorted(bench.rglob("*"))
        if path.is_dir()
        and not set(path.relative_to(bench).parts) & TOP_DIRS_NOT_PACKAGES
        and not (path / "__init__.py").is_file()
    ]
    return problems


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def sys_path_edits(source: str) -> list[int]:
    """Return the lines of ``source`` that change ``sys.path`` (call, item, slice or rebind)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _is_sys_path(node.func.value)
        ):
            lines.append(node.lineno)  # sys.path.insert / append / extend / remove ...
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if _is_sys_path(target) or (
                isinstance(target, ast.Subscript) and _is_sys_path(target.value)
            ):
                lines.append(node.lineno)  # sys.path = ..., sys.path[:0] = ..., sys.path += ...
    return sorted(lines)


def test_the_scan_finds_every_form_of_sys_path_edit() -> None:
    source = (
        "import sys\n"
        "sys.path.insert(0, 'a')\n"
        "sys.path.append('a')\n"
        "sys.path[:0] = ['a']\n"
        "sys.path += ['a']\n"
        "sys.path = ['a']\n"
        "print(sys.path[0])\n"
    )
    assert sys_path_edits(source) == [2, 3, 4, 5, 6]


def test_bench_is_packages_with_no_top_level_script() -> None:
    assert top_level_problems(BENCH) == []


def test_no_benchmark_edits_sys_path() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in _sources(BENCH)
        if (lines := sys_path_edits(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "run benchmarks as modules from the root; import bench.<area>"


@pytest.mark.slow
def test_every_benchmark_module_imports_from_the_root() -> None:
    modules = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in _sources(BENCH)
        if path.name != "__init__.py"
    ]
    modules = [name for name in modules if name not in OTHER_VENV]
    program = (
        "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
