"""The engine (and the agent) import no web framework: Django, Celery and Channels stay out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, pkgutil, sys
names = []
for package in sys.argv[1:]:
    module = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.split(".")[-1] in ("__main__",):
            continue
        importlib.import_module(info.name)
        names.append(info.name)
forbidden = {"django", "celery", "channels", "rest_framework", "daphne", "kombu"}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in forbidden)
print(len(names), ",".join(loaded))
"""


def _packages() -> list[str]:
    found = ["trafficmgr.routing"]
    if (ROOT / "agents" / "__init__.py").exists():
        found.append("agents")
    return found


def test_engine_modules_import_no_web_framework() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *_packages()],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    count, _, loaded = result.stdout.strip().partition(" ")
    assert int(count) >= 8  # the probe really walked the engine's modules
    assert loaded == "", f"engine imports pulled in: {loaded}"
