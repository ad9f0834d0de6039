"""The standalone gateway starts and serves without ``geoip2`` importable (it runs with no
GeoIP database anyway): clients are unlocated, and it says so in a warning."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from trafficmgr.fleetfile import dump_fleet
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BLOCK = "import sys\nsys.modules['geoip2'] = None\nsys.modules['geoip2.database'] = None\n"


def test_gateway_serves_without_geoip2(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK)  # imported first: geoip2 is gone
    (tmp_path / "fleet.yaml").write_text(dump_fleet(fleet))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    env["TRAFFICMGR_CLIENT_TOKENS"] = "sk-geo"
    args = ["--fleet", str(tmp_path / "fleet.yaml"), "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trafficmgr.gateway", *args],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-geo")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                models = [m.id for m in client.models.list()]
                break
            except openai.APIConnectionError:
                assert proc.poll() is None, "the gateway exited"
                assert time.monotonic() < deadline, "gateway did not start"
                time.sleep(0.2)
        assert models
        answer = client.completions.create(model="m1", prompt="a b", max_tokens=2)
        assert answer.choices[0].text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "geoip2 is not installed" in err and "every client is unlocated" in err
