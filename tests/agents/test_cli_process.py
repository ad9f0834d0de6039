"""The agent as a process: SIGTERM stops it cleanly, missing NVML and bad settings fail clearly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agents.push import HEARTBEAT_PATH
from tests.agents.conftest import Stub

ROOT = Path(__file__).resolve().parents[2]


def agent_process(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAFFICMGR_AGENT_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "agents", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_stops_a_simulated_agent_cleanly(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (200, {}))
    proc = agent_process(
        "--simulate",
        "--control-plane",
        stub.url,
        "--token",
        "t0k",
        "--endpoint",
        "euw-1",
        "--interval",
        "0.1",
        "--model",
        "llama-3-70b",
        "--sim-gpus",
        "2",
    )
    try:
        deadline = time.monotonic() + 8
        while len(stub.posts(HEARTBEAT_PATH)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "SIGTERM received, shutting down" in err
    posts = stub.posts(HEARTBEAT_PATH)
    assert posts[0].headers["Authorization"] == "Bearer t0k"
    docs = [p.json() for p in posts]
    assert all(d["endpoint"] == "euw-1" and d["server"]["kind"] == "sim" for d in docs)
    assert docs[0]["agent"]["nvml"] == "simulated" and len(docs[0]["gpus"]) == 2
    seqs = [d["seq"] for d in docs]
    assert seqs == sorted(set(seqs))


def test_without_nvml_it_says_so_and_exits_non_zero() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        has_driver = True
    except pynvml.NVMLError:
        has_driver = False
    proc = agent_process("--once", "--endpoint", "euw-1")
    _, err = proc.communicate(timeout=10)
    if has_driver:
        assert proc.returncode == 0
    else:
        assert proc.returncode == 3
        assert "NVML is not available on this host" in err and "--simulate" in err


def test_bad_settings_exit_2_naming_the_flag() -> None:
    proc = agent_process("--endpoint", "euw-1", "--token", "t")
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 2 and "--control-plane" in err


def test_once_prints_one_heartbeat_as_json() -> None:
    import json

    proc = agent_process("--once", "--simulate", "--endpoint", "euc-2", "--sim-gpu", "L4")
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["endpoint"] == "euc-2" and doc["gpus"][0]["name"] == "NVIDIA L4"
