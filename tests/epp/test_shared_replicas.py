"""Two endpoint-picker replicas with one Redis merge each other's state and say so in /metrics."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from tests.gateway.world import world_fleet
from trafficmgr.contracts import PREFIX
from trafficmgr.fleetfile import dump_fleet
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("trafficmgr_epp_shared_state_") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_two_replicas_merge_each_other(redis_url: str, tmp_path: Path) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/14" if redis_url.count("/") > 2 else redis_url + "/14"
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{PREFIX}:rp:*"):
        client.delete(key)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(dump_fleet(world_fleet()))
    procs, ports = [], []
    try:
        for _ in range(2):
            metrics = free_port()
            ports.append(metrics)
            cmd = [sys.executable, "-m", "trafficmgr.epp", "--fleet", str(fleet),
                   "--listen", f"127.0.0.1:{free_port()}", "--token", "t",
                   "--shared-state", url, "--metrics-listen", f"127.0.0.1:{metrics}"]  # fmt: skip
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        seen: list[dict[str, float]] = []
        while time.monotonic() < deadline:
            try:
                seen = [scrape(p) for p in ports]
            except OSError:
                seen = []
            if seen and all(s.get("trafficmgr_epp_shared_state_peers") == 1 for s in seen):
                break
            time.sleep(0.2)
        assert seen, "the replicas did not serve /metrics"
        for figures in seen:
            assert figures["trafficmgr_epp_shared_state_enabled"] == 1
            assert figures["trafficmgr_epp_shared_state_connected"] == 1
            assert figures["trafficmgr_epp_shared_state_peers"] == 1
            assert figures["trafficmgr_epp_shared_state_local_only"] == 0
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert not list(client.scan_iter(f"{PREFIX}:rp:proc:*"))  # withdrawn on the way out
