"""The compiled build (``bench/compiled_env.sh``: the hot modules through mypyc) decides as the
sources do: the engine's, the core's and the simulator's tests run against it, in a process
whose ``trafficmgr`` is the build's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = ["tests/routing", "tests/requestpath", "tests/sim"]


def _build() -> Path:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the compiled build cannot be made here")
    mypyc = Path(sys.executable).parent / "mypyc"
    if not mypyc.exists():
        pytest.skip("mypyc is not installed (make install brings it)")
    done = subprocess.run(
        ["bash", "bench/compiled_env.sh"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYC": str(mypyc)},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_compiled_modules_are_the_ones_the_build_lists() -> None:
    built = _build()
    listed = subprocess.run(
        ["bash", "bench/compiled_env.sh", "--modules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for module in listed:
        stem = built / module.removesuffix(".py")
        assert list(stem.parent.glob(stem.name + ".cpython-*.so")), module


def test_the_engine_core_and_simulator_tests_pass_against_the_compiled_build() -> None:
    built = _build()
    program = (
        "import sys\n"
        "import trafficmgr.requestpath.core as core, trafficmgr.routing.ai_aware as ai\n"
        "assert core.__file__.endswith('.so') and ai.__file__.endswith('.so'), core.__file__\n"
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
        # -P: the checkout is not put first on the path, so ``trafficmgr`` is the build's
        [sys.executable, "-P", "-c", program, *args, *SUITES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{built}{os.pathsep}{ROOT}"},
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
