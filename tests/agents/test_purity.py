"""The agent installs alone on a GPU node: importing it pulls in no control-plane framework."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "django",
    "rest_framework",
    "celery",
    "channels",
    "daphne",
    "redis",
    "trafficmgr",
    "regions",
    "dashboard",
    "yaml",
)
MODULES = (
    "agents",
    "agents.cli",
    "agents.agent",
    "agents.config",
    "agents.nvml",
    "agents.gpm",
    "agents.server_metrics",
    "agents.probe",
    "agents.push",
    "agents.drill",
    "agents.simulate",
    "agents.sim_nvml",
    "agents.sim_traces",
    "agents.heartbeat",
)


def test_importing_the_agent_loads_no_framework() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == ""


def test_agent_sources_name_no_framework() -> None:
    for path in (ROOT / "agents").glob("*.py"):
        text = path.read_text()
        for name in ("django", "celery", "channels", "trafficmgr."):
            assert f"import {name}" not in text and f"from {name}" not in text, path
