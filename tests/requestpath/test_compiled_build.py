"""The compiled build (``scripts/build_compiled.py``: the hot modules ``pyproject.toml`` lists,
through mypyc) decides and serves as the sources do: the engine's, the core's, the simulator's
and the gateway's tests run against it, in a process whose ``trafficmgr`` is the build's.
Python's safe path is set in that process's environment, so the gateways those tests start as
processes of their own (``python -m trafficmgr.gateway``, on uvloop) run from the build too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = ["tests/routing", "tests/requestpath", "tests/sim", "tests/gateway"]
# imported before pytest puts the checkout first on the path, and checked to be compiled
COMPILED = [
    "trafficmgr.requestpath.core",
    "trafficmgr.routing.ai_aware",
    "trafficmgr.gateway.http",
    "trafficmgr.gateway.messages",
    "trafficmgr.gateway.upstream",
]


def _build() -> Path:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the compiled build cannot be made here")
    mypyc = Path(sys.executable).parent / "mypyc"
    if not mypyc.exists():
        pytest.skip("mypyc is not installed (make install brings it)")
    done = subprocess.run(
        [sys.executable, "scripts/build_compiled.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYC": str(mypyc)},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_compiled_modules_are_the_ones_the_build_lists() -> None:
    built = _build()
    listed = subprocess.run(
        [sys.executable, "scripts/build_compiled.py", "--modules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for module in listed:
        stem = built / module.removesuffix(".py")
        assert list(stem.parent.glob(stem.name + ".cpython-*.so")), module


@pytest.mark.slow
def test_the_engine_core_simulator_and_gateway_tests_pass_against_the_compiled_build() -> None:
    built = _build()
    program = (
        "import importlib, sys\n"
        f"for name in {COMPILED!r}:\n"
        "    path = importlib.import_module(name).__file__\n"
        "    assert path.endswith('.so'), path\n"
        "import pytest\n"
        "sys.exit(pytest.main(sys.argv[1:]))\n"
    )
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-x",
        "--deselect",
        f"{Path(__file__).relative_to(ROOT)}",
    ]
    done = subprocess.run(
        # the safe path: the checkout is not put first on the path (here, and in the
        # gateways the tests start), so ``trafficmgr`` is the build's; ``tests`` the checkout's
        [sys.executable, "-c", program, *args, *SUITES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": f"{built}{os.pathsep}{ROOT}"},
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
