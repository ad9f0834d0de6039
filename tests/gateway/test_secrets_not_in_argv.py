"""``python -m trafficmgr.gateway`` takes its client tokens from a file or the environment, so
they are not in its command line (what ``ps`` shows every user); ``--token`` still works and
warns."""

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


def _serves(port: int, token: str) -> bool:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)
    deadline = time.monotonic() + 30
    while True:
        try:
            return bool(list(client.models.list()))
        except openai.APIConnectionError:
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.2)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trafficmgr.gateway", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return err


def test_tokens_from_a_file_and_the_environment_stay_out_of_argv(
    fleet: Fleet, tmp_path: Path
) -> None:
    (tmp_path / "fleet.yaml").write_text(dump_fleet(fleet))
    (tmp_path / "tokens").write_text("sk-from-file\n")
    (tmp_path / "upstream").write_text("sk-upstream\n")
    port = free_port()
    args = ["--fleet", str(tmp_path / "fleet.yaml"), "--listen", f"127.0.0.1:{port}"]
    args += ["--token-file", str(tmp_path / "tokens")]
    args += ["--upstream-key-file", str(tmp_path / "upstream")]
    proc = _start(args, {"TRAFFICMGR_CLIENT_TOKENS": "sk-from-env"})
    try:
        assert _serves(port, "sk-from-file") and _serves(port, "sk-from-env")
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"sk-from" not in cmdline and b"sk-upstream" not in cmdline
    finally:
        err = _stop(proc)
    assert "process list" not in err


def test_a_token_on_the_command_line_still_works_with_a_warning(
    fleet: Fleet, tmp_path: Path
) -> None:
    (tmp_path / "fleet.yaml").write_text(dump_fleet(fleet))
    port = free_port()
    args = ["--fleet", str(tmp_path / "fleet.yaml"), "--listen", f"127.0.0.1:{port}"]
    proc = _start([*args, "--token", "sk-argv"], {})
    try:
        assert _serves(port, "sk-argv")
    finally:
        err = _stop(proc)
    assert "--token shows in the process list" in err


def test_no_token_at_all_is_a_clear_error(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(dump_fleet(fleet))
    env = {k: v for k, v in os.environ.items() if k != "TRAFFICMGR_CLIENT_TOKENS"}
    done = subprocess.run(
        [sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(tmp_path / "fleet.yaml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "no client token" in done.stderr
