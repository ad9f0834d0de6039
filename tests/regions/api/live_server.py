"""The API served by a real ASGI server in a child process, with stores the test can break.

For the tests that probe the API from outside: its own SQLite database (migrated, the small
named world applied, tokens issued), its own ``redis-server`` on a free loopback port (never
the shared one: the test kills it), and ``uvicorn`` or ``daphne`` serving
``trafficmgr.asgi:application`` as deployed.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.worlds import WORLD
from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[3]

# Run in a child process: migrate, apply the world, print the secrets of fresh tokens.
_PREPARE = """
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from regions.access.issue import create_token
from regions.audit.trail import acting_as
from regions.fleet.plan import apply_plan, plan_fleet
from trafficmgr.fleetfile import load_fleet_text
with acting_as("tests:live", "cli"):
    apply_plan(plan_fleet(load_fleet_text(sys.stdin.read())))
    secrets = {role: create_token(f"live-{role}", role, created_by="tests")[1]
               for role in ("admin", "viewer")}
    secrets["agent"] = create_token("live-agent", "agent", region="eu-west",
                                    created_by="tests")[1]
print(json.dumps(secrets))
"""


def wait_for(condition: Callable[[], bool], message: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def server_env(var_dir: Path, database_url: str, redis_url: str = "") -> dict[str, str]:
    """The environment of a child process: its own database and Redis, plain HTTP."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DJANGO_SETTINGS_MODULE="trafficmgr.settings",
        TRAFFICMGR_VAR_DIR=str(var_dir),
        DATABASE_URL=database_url,
        TRAFFICMGR_TLS="0",
        SECRET_KEY=env.get("SECRET_KEY") or "test-only-secret-key-not-for-production",
        PYTHONPATH=str(ROOT),
    )
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def prepare_database(env: Mapping[str, str]) -> dict[str, str]:
    """Migrate the child's database, apply the world; the secrets by role (and ``agent``)."""
    done = subprocess.run(
        [sys.executable, "-c", _PREPARE],
        input=WORLD,
        env=dict(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    secrets: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return secrets


@dataclass
class RedisProcess:
    """A throw-away redis-server on 127.0.0.1 that the test may kill."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "no redis-server binary"
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.workdir)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: accepts(self.port), "redis-server did not start", 10.0)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@dataclass
class AppServer:
    """``uvicorn`` or ``daphne`` serving the ASGI application on a free loopback port."""

    env: Mapping[str, str]
    log: Path
    kind: str = "uvicorn"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        app = "trafficmgr.asgi:application"
        if self.kind == "daphne":
            args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), app]
        else:
            args = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1"]
            args += ["--port", str(self.port), "--log-level", "warning", app]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                args, env=dict(self.env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
        wait_for(self._up, f"{self.kind} did not start; see {self.log}", 60.0)

    def _up(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{self.kind} exited: {self.log.read_text()[-3000:]}")
        return accepts(self.port)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def request(
        self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> Reply:
        """Send one request (no redirects followed); the status, headers and body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30.0)
        try:
            conn.request(method, path, body=body or None, headers=dict(headers or {}))
            response = conn.getresponse()
            return Reply(
                response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            )
        finally:
            conn.close()


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)
