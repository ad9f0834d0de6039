"""``manage.py demo`` runs the alert worker: a test send reaches a receiver on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.regions.alerts.receiver import receiving
from tests.regions.test_commands import ROOT, start_demo
from trafficmgr.testing.demo import Demo
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.slow


def call(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        f"{base}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def admin_token(demo: Demo) -> str:
    """Issue an admin token from a second shell, as an operator of the demo would."""
    out = subprocess.run(
        [sys.executable, "manage.py", "create_token", "--name", "alerts", "--role", "admin"],
        cwd=ROOT,
        env=demo.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return out.split()[-1]


def test_a_test_send_is_delivered_by_the_demo(tmp_path: Path) -> None:
    port = free_port()
    demo = start_demo(tmp_path, port, free_port())
    try:
        demo.wait_for("trafficmgr demo is running")
        token = demo.wait_for("API token").split()[2]  # an operator's
        admin = admin_token(demo)
        base = f"http://127.0.0.1:{port}"
        with receiving([200]) as hook:
            # test sends only: without agents the demo's regions go down, and say so
            channel = {"name": "ops", "kind": "webhook", "url": hook.url, "events": ["test"]}
            call(base, admin, "POST", "/api/v1/alert-channels/", channel)
            queued = call(base, token, "POST", "/api/v1/alert-channels/ops/test")
            deadline = time.monotonic() + 30
            while not hook.bodies and time.monotonic() < deadline:
                time.sleep(0.2)
            assert [b["event"] for b in hook.bodies] == ["test"]
            shown = call(base, token, "GET", f"/api/v1/notifications/{queued['id']}/")
            while shown["status"] == "pending" and time.monotonic() < deadline:
                time.sleep(0.2)
                shown = call(base, token, "GET", f"/api/v1/notifications/{queued['id']}/")
            assert (shown["status"], shown["attempts"]) == ("delivered", 1)
    finally:
        code = demo.interrupt()
    assert code == 0, "".join(demo.lines)
    assert "Traceback" not in "".join(demo.lines)
