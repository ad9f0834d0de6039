"""The Prometheus rules for the control plane name series the control plane exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "prometheus-rules.yml"
EXPORTERS = (ROOT / "regions" / "metrics.py", ROOT / "trafficmgr" / "dns" / "exporter.py")


def control_plane_rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (group,) = [g for g in groups if g["name"] == "trafficmgr-control-plane"]
    return list(group["rules"])


def test_the_built_in_alerts_have_alertmanager_twins() -> None:
    names = {str(r["alert"]) for r in control_plane_rules()}
    for name in ("RegionDown", "EndpointEjected", "HeartbeatLag", "LoopStalled", "TickOverrun"):
        assert f"Trafficmgr{name}" in names


def test_every_series_a_rule_reads_is_exported() -> None:
    exported = set()
    for path in EXPORTERS:
        exported |= set(re.findall(r'"(trafficmgr_[a-z_]+)"', path.read_text()))
    for rule in control_plane_rules():
        for series in re.findall(r"trafficmgr_[a-z_]+", str(rule["expr"])):
            assert series.removesuffix("_total") in exported, (rule["alert"], series)


@pytest.mark.integration
@pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool not installed (Debian: prometheus)"
)
def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
