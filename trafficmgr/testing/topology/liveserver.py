"""A real server for the browser tests and the dashboard benchmark.

A temporary directory holds the SQLite database and VAR_DIR; ``migrate``, ``apply_fleet
examples/fleet.yaml``, ``createsuperuser``, ``create_user`` (the operator and viewer users) and
``create_token`` (an agent token per region) run in that environment; then the server starts
on a free 127.0.0.1 port: ``manage.py demo --http ... --no-agents`` when the demo command
offers it (set
``TRAFFICMGR_DASHBOARD_SERVER=asgi`` to skip it), else daphne serving the test suite's
``ASGI_FALLBACK`` (run from a checkout).
REDIS_URL and DATABASE_URL of the caller are ignored: the server is self-contained.
``launch(agents=True)`` keeps the demo's own simulated agents, which obey drill instructions
(the drills' browser tests need a fault that really happens).

``launch_deployed`` starts the deployed topology instead (docker-compose.yml's services as
local processes, ``cluster``) on the same fleet and users.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trafficmgr.testing.demo import DemoPorts, demo_argv
from trafficmgr.testing.ports import TCP_AND_UDP, free_port
from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.processes import ROOT, Process
from trafficmgr.testing.topology.stores import Services

FLEET = ROOT / "examples" / "fleet.yaml"
# What daphne serves where the demo command cannot run the control loop: the real ASGI app
# with a loop ticking in the server's own event loop (a module of the checkout's tests).
ASGI_FALLBACK = "tests.dashboard.ticking_asgi:application"
PASSWORD = "dashboard-test-password"
SLOW_TTFT_MS = 30_000  # three times the demo fleet's 10 s objective: a degraded endpoint
ADMIN, OPERATOR, VIEWER = "test-admin", "test-operator", "test-viewer"
CHROMIUM = os.environ.get("TRAFFICMGR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The users of each role the tests sign in as, made by ``manage.py create_user``.
ROLE_USERS = {OPERATOR: "operator", VIEWER: "viewer"}


def user_commands() -> list[tuple[list[str], dict[str, str]]]:
    """Return the ``manage.py`` arguments and environment that make the role users."""
    env = {"TRAFFICMGR_USER_PASSWORD": PASSWORD}
    return [(["create_user", name, "--role", role], env) for name, role in ROLE_USERS.items()]


def token_commands() -> list[tuple[str, list[str]]]:
    """Return each region and the ``manage.py`` arguments of its heartbeat feeder's token."""
    return [
        (
            region,
            ["create_token", "--name", f"feeder-{region}", "--role", "agent", "--region", region],
        )
        for region in fleet_regions()
    ]


def fleet_regions() -> list[str]:
    return [r["name"] for r in yaml.safe_load(FLEET.read_text())["regions"]]


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (.venv/bin/pip install playwright)"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


def demo_supports_loop() -> bool:
    """Tell whether ``manage.py demo`` runs the control loop (so the page moves)."""
    choice = os.environ.get("TRAFFICMGR_DASHBOARD_SERVER", "")
    demo = ROOT / "regions" / "management" / "commands" / "demo.py"
    if choice in {"demo", "asgi"}:
        return choice == "demo"
    if not demo.exists():
        return False
    text = demo.read_text()
    return "--no-agents" in text and any(
        name in text for name in ("EmbeddedSystem", "EmbeddedTicker", "controlloop")
    )


@dataclass
class LiveServer:
    url: str
    tmp: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)
    mode: str = ""
    agent_tokens: dict[str, str] = field(default_factory=dict)
    agents: bool = False  # the demo's simulated agents (else tests feed heartbeats)

    def __post_init__(self) -> None:
        self.log = self.tmp / "server.log"

    def manage(self, *args: str, extra_env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def prepare(self) -> None:
        self.manage("migrate", "--noinput")
        self.manage("apply_fleet", str(FLEET))
        self.manage(
            "createsuperuser",
            "--noinput",
            "--username",
            "admin",
            "--email",
            "admin@example.test",
            extra_env={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        )
        for args, env in user_commands():
            self.manage(*args, extra_env=env)
        # create_token prints the secret alone on its last line
        self.agent_tokens = {
            region: self.manage(*args).strip().splitlines()[-1] for region, args in token_commands()
        }

    def start(self, timeout: float = 40.0) -> None:
        port = int(self.url.rsplit(":", 1)[1])
        if self.agents or demo_supports_loop():
            self.mode = "demo"
            ports = DemoPorts(port, free_port(TCP_AND_UDP), free_port())
            cmd = demo_argv(ports, agents=self.agents, fleet=FLEET)
        else:
            self.mode = "asgi"
            cmd = [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                ASGI_FALLBACK,
            ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/login/", timeout=2) as res:
                    if res.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        self.stop()
        tail = self.log.read_text()[-3000:]
        raise RuntimeError(f"server did not answer within {timeout} s: {tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


def launch(agents: bool = False) -> LiveServer:
    """Prepare a fresh database and start a server on it (the caller stops it); ``agents``:
    the demo runs its simulated agents."""
    tmp = Path(tempfile.mkdtemp(prefix="trafficmgr-dashboard-"))
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env.update(
        {
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "TRAFFICMGR_VAR_DIR": str(tmp / "var"),
            "SECRET_KEY": "dashboard-browser-test-only-secret-key",
            "TRAFFICMGR_TLS": "0",
            "DEBUG": "0",
            "TRAFFICMGR_TICK_SECONDS": "1",
            "PYTHONPATH": str(ROOT),
            "LOG_LEVEL": "WARNING",
        }
    )
    server = LiveServer(url=f"http://127.0.0.1:{free_port()}", tmp=tmp, env=env, agents=agents)
    try:
        server.prepare()
        server.start()
    except BaseException:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return server


def shutdown(server: LiveServer) -> None:
    server.stop()
    shutil.rmtree(server.tmp, ignore_errors=True)


class HeartbeatFeeder:
    """Post a heartbeat per endpoint of the fleet every second, with agent tokens, like
    simulated agents would (figures drift smoothly so the charts move)."""

    def __init__(self, server: LiveServer, interval_s: float = 1.0) -> None:
        self.server = server
        self.interval_s = interval_s
        fleet = yaml.safe_load(FLEET.read_text())
        self.endpoints = [(r["name"], e) for r in fleet["regions"] for e in r["endpoints"]]
        self.silent: set[str] = set()  # regions whose endpoints stop reporting
        self.slow: set[str] = set()  # endpoints whose TTFT p99 misses the objective
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat-feeder", daemon=True)
        self.seq = 0
        self.errors = 0

    def start(self) -> HeartbeatFeeder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def body(self, region: str, endpoint: dict[str, Any], now: float) -> dict[str, Any]:
        phase = (zlib.crc32(endpoint["name"].encode()) % 100) / 100 * math.tau
        load = 0.55 + 0.3 * math.sin(now / 20 + phase)
        total = {"H100": 81559, "A100": 81920, "L4": 23034}[endpoint["gpu"]]
        gpus = [
            {
                "index": i,
                "uuid": f"GPU-{endpoint['name']}-{i}",
                "name": endpoint["gpu"],
                "util_pct": round(min(100.0, 100 * load + i), 1),
                "mem_used_mb": round(total * (0.35 + 0.5 * load)),
                "mem_total_mb": total,
                "temp_c": 55 + 20 * load,
                "power_w": 300 * load,
            }
            for i in range(endpoint["gpus"])
        ]
        server = {
            "kind": "sim",
            "requests_running": int(40 * load),
            "requests_waiting": int(max(0.0, 30 * (load - 0.6))),
            "kv_cache_usage": round(min(1.0, load), 3),
            "tokens_per_s": 2000 * load,
            "ttft_p50_ms": round(120 + 200 * load, 1),
            "ttft_p99_ms": SLOW_TTFT_MS
            if endpoint["name"] in self.slow
            else round(600 + 900 * load),
            "models_loaded": endpoint["models"],
        }
        return {
            "endpoint": endpoint["name"],
            "seq": self.seq,
            "sent_at": now,
            "gpus": gpus,
            "server": server,
            "probe": {"ok": True, "latency_ms": 3.0},
        }

    def post(self, region: str, doc: dict[str, Any]) -> None:
        request = urllib.request.Request(
            f"{self.server.url}/api/v1/heartbeats/",
            data=json.dumps(doc).encode(),
            headers={
                "Authorization": f"Bearer {self.server.agent_tokens[region]}",
                "Content-Type": "application/json",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=5):
                pass
        except (urllib.error.URLError, OSError):
            self.errors += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seq += 1
            now = time.time()
            for region, endpoint in self.endpoints:
                if region not in self.silent:
                    self.post(region, self.body(region, endpoint, now))
            self._stop.wait(self.interval_s)


class ComposeCluster(Cluster):
    """The e2e cluster with compose's ``agents`` service: one ``simulate_agents`` process
    pushing for every endpoint (load 0.4, the demo trace), not one agent process each."""

    def start_agent(self, endpoint: dict[str, Any], token: str) -> Process:
        if not any(p.name == "agents" for p in self.processes):
            self.spawn_manage("agents", ["simulate_agents", "--control-plane", self.url])
        return self.process("agents")


def launch_deployed(database_url: str) -> ComposeCluster:
    """Start docker-compose.yml's topology on the demo fleet, with the users above.

    PostgreSQL is ``database_url``'s server, in a database of the cluster's own (created, and
    dropped by ``shutdown_deployed``: migrating and applying the demo fleet to the named one
    would replace whatever fleet it holds); Redis a private redis-server. Every process runs
    in a group of its own: the caller must call ``shutdown_deployed`` whatever happens.
    """
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    tmp = Path(tempfile.mkdtemp(prefix="trafficmgr-dashboard-deployed-"))
    cluster = ComposeCluster(tmp, FLEET.read_text(), Services(database_url, redis_url=""))
    try:
        cluster.start()
        for args, env in user_commands():
            users = cluster.spawn("users", [sys.executable, "manage.py", *args], env)
            assert cluster.finish(users, 60) == 0, f"creating the users failed:\n{users.tail()}"
    except BaseException:
        shutdown_deployed(cluster)
        raise
    return cluster


def shutdown_deployed(cluster: Cluster) -> list[str]:
    """Stop every process group of ``cluster``, drop its database; return what is left."""
    try:
        return cluster.stop()
    finally:
        shutil.rmtree(cluster.workdir, ignore_errors=True)
