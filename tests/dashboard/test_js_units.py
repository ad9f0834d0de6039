"""The page's own logic (state, reconnects) under node's test runner: tests/dashboard/js/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

JS_TESTS = Path(__file__).parent / "js"
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_dashboards_scripts_pass_their_unit_tests() -> None:
    files = sorted(str(p) for p in JS_TESTS.glob("*.test.mjs"))
    assert files
    done = subprocess.run(
        [str(NODE), "--test", *files], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout
