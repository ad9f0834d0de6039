"""``python -m trafficmgr.gateway``: two workers on one port, serving the OpenAI client, and
a clean exit on SIGTERM."""

from __future__ import annotations

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


def _fleet_file(fleet: Fleet, path: Path) -> Path:
    path.write_text(dump_fleet(fleet))
    return path


def test_two_workers_serve_and_stop_on_sigterm(fleet: Fleet, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "trafficmgr.gateway",
            "--fleet", str(_fleet_file(fleet, tmp_path / "fleet.yaml")),
            "--listen", f"127.0.0.1:{port}", "--token", "cli-secret", "--workers", "2",
        ],
        cwd=ROOT,
    )  # fmt: skip
    try:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="cli-secret", max_retries=5
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                models = sorted(m.id for m in client.models.list())
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "gateway did not start"
                time.sleep(0.2)
        assert models == ["m1", "m2"]
        for _ in range(6):
            answer = client.completions.create(model="m1", prompt="a b", max_tokens=2)
            assert answer.choices[0].text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
