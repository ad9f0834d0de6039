"""The distributed system as docker-compose.yml wires it, as local processes on loopback.

One ``Cluster`` owns: a PostgreSQL database of its own (``trafficmgr_e2e_<pid>``, created
and dropped afterwards), a Redis of its own (``start_redis``), the one-shot commands
(``migrate``, ``apply_fleet``, ``create_token``) and the long-running services: the web
service's own command from docker-compose.yml (``uvicorn trafficmgr.asgi:application --workers
2 ...``, see ``web_command``), ``celery -A trafficmgr worker``, ``celery -A trafficmgr beat``,
``manage.py dnsserver`` and one ``trafficmgr-agent --simulate`` per endpoint of the fleet.
Each process runs in a session of its own (so a signal to its group reaches its children,
e.g. the worker's pool) and logs to a file under ``workdir``; ``stop`` ends every group it
started, then drops the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trafficmgr.contracts import HEARTBEATS_KEY, TABLE_REDIS_KEY, redis_key
from trafficmgr.runtime.procs import group_alive
from trafficmgr.testing.ports import TCP_AND_UDP, free_port
from trafficmgr.testing.topology.processes import (
    BIN,
    ROOT,
    Process,
    end_with_parent,
    signal_group,
    wait_until,
    web_command,
)
from trafficmgr.testing.topology.stores import (
    DB_PREFIX,
    Services,
    claim_redis,
    create_database,
    drop_database,
    with_database,
)

COMMAND_TIMEOUT_S = 90.0
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 8.0

WEB_WORKERS = 2  # what compose runs by default, and enough to show the workers share updates


@dataclass
class Cluster:
    """The processes of one distributed deployment (see the module docstring)."""

    workdir: Path
    fleet_yaml: str
    services: Services
    tick_s: float = 1.0
    # Offered load of the simulated nodes: light enough that every region's drill passes the
    # guardrails (capacity left for the strict residency zone's demand) with room to spare.
    sim_load: float = 0.05
    db_name: str = field(default_factory=lambda: f"{DB_PREFIX}{os.getpid()}")
    processes: list[Process] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)  # "admin" and agent tokens by region
    killed: list[str] = field(default_factory=list)  # processes SIGTERM did not end in time
    timings: dict[str, float] = field(default_factory=dict)  # seconds into start()

    def __post_init__(self) -> None:
        self.fleet = yaml.safe_load(self.fleet_yaml)
        self.http_port = free_port()
        self.dns_port = free_port(TCP_AND_UDP)
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.dns = ("127.0.0.1", self.dns_port)
        self.database_url = with_database(self.services.database_url, self.db_name)
        self.redis_url = ""  # set by start_redis()
        self.redis_port = 0  # the cluster's own redis-server's, when it has one
        self.var_dir = self.workdir / "var"
        self.logs = self.workdir / "logs"
        self._db_created = False
        self._redis: Any = None
        self._secret_key = secrets.token_urlsafe(40)

    # --- what every process is told -------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The deployment's settings, through the environment as in docker-compose.yml."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAFFICMGR_", "DJANGO_"))}
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "SECRET_KEY": self._secret_key,
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "TRAFFICMGR_TLS": "0",
                "TRAFFICMGR_VAR_DIR": str(self.var_dir),
                "TRAFFICMGR_TICK_SECONDS": f"{self.tick_s:g}",
                "TRAFFICMGR_DRILL_DNS": f"127.0.0.1:{self.dns_port}",
                "TRAFFICMGR_DRILL_HTTP": self.url,
                "LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    # --- bringing it up -------------------------------------------------------------------

    def start(self) -> Cluster:
        """Prepare the stores, run the one-shot commands, start the services, wait for them."""
        began = time.monotonic()

        def mark(phase: str) -> None:
            self.timings[phase] = round(time.monotonic() - began, 2)

        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.workdir / "fleet.yaml").write_text(self.fleet_yaml)
        create_database(self.services, self.db_name)
        self._db_created = True
        self.start_redis()
        self.manage("migrate", ["migrate", "--noinput"])
        mark("migrated")
        creating = {
            "admin": self.spawn_manage(
                "token-admin", ["create_token", "--name", "e2e admin", "--role", "admin"]
            )
        }
        self.manage("apply_fleet", ["apply_fleet", str(self.workdir / "fleet.yaml")])
        mark("fleet applied")
        for region in self.region_names():  # an agent token is bound to the region's endpoints
            creating[region] = self.spawn_manage(
                f"token-{region}",
                [
                    *("create_token", "--name", f"e2e agents {region}"),
                    *("--role", "agent", "--region", region),
                ],
            )
        self.start_services()
        for key, proc in creating.items():
            code = self.finish(proc, COMMAND_TIMEOUT_S)
            assert code == 0, f"create_token for {key} exited {code}:\n{proc.tail()}"
            self.tokens[key] = proc.text().strip().splitlines()[-1]
        mark("tokens created")
        for region in self.fleet["regions"]:
            for endpoint in region["endpoints"]:
                self.start_agent(endpoint, self.tokens[region["name"]])
        self.wait_ready()
        mark("settled")
        return self

    def start_services(self) -> None:
        """The long-running processes of docker-compose.yml, with its commands."""
        self.spawn("web", web_command(self.http_port, WEB_WORKERS))
        celery = str(BIN / "celery")
        self.spawn(
            "worker",
            [
                *(celery, "-A", "trafficmgr", "worker", "--loglevel", "INFO", "--concurrency", "2"),
                *("-n", f"e2e-{os.getpid()}@%h"),
            ],
        )
        self.spawn(
            "beat",
            [
                *(celery, "-A", "trafficmgr", "beat", "--loglevel", "INFO"),
                *("--schedule", str(self.workdir / "celerybeat-schedule")),
            ],
        )
        self.spawn_manage("dns", ["dnsserver", "--listen", f"127.0.0.1:{self.dns_port}"])

    def start_agent(self, endpoint: dict[str, Any], token: str) -> Process:
        """One simulated GPU node; its token goes through the environment, not the argv."""
        models = [arg for model in endpoint.get("models", []) for arg in ("--model", model)]
        return self.spawn(
            f"agent-{endpoint['name']}",
            [
                *(str(BIN / "trafficmgr-agent"), "--control-plane", self.url),
                *("--endpoint", endpoint["name"], "--simulate", "--interval", "1"),
                *("--sim-gpu", endpoint["gpu"], "--sim-gpus", str(endpoint["gpus"])),
                *("--sim-load", f"{self.sim_load:g}", *models),
            ],
            extra_env={"TRAFFICMGR_AGENT_TOKEN": token},
        )

    def wait_ready(self) -> None:
        """Wait for every service to answer and every region to be healthy at full ramp."""
        deadline = time.monotonic() + READY_TIMEOUT_S

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        wait_until(lambda: self._http_ok("/readyz"), left(), "the web server's /readyz")
        wait_until(
            lambda: len(self.web_workers()) >= WEB_WORKERS,
            left(),
            f"{WEB_WORKERS} uvicorn worker processes to start",
        )
        wait_until(self._dns_answers, left(), "the DNS server to answer SOA")
        wait_until(lambda: self._logged("worker", " ready."), left(), "the celery worker")
        wait_until(lambda: self._logged("beat", "beat: Starting"), left(), "celery beat")
        self.wait_settled(left())

    def _logged(self, name: str, text: str) -> bool:
        self.check_running()
        return text in self.process(name).text()

    def _http_ok(self, path: str) -> bool:
        self.check_running()
        with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as response:
            return bool(response.status == 200)

    def _dns_answers(self) -> bool:
        import dns.message
        import dns.query

        query = dns.message.make_query(self.fleet["zone"], "SOA")
        reply = dns.query.udp(query, self.dns[0], port=self.dns[1], timeout=1)
        return reply.rcode() == 0 and bool(reply.answer)

    # --- what tests use -------------------------------------------------------------------

    @property
    def redis(self) -> Any:
        assert self._redis is not None, "Redis is not started yet"
        return self._redis

    def region_names(self) -> list[str]:
        return [r["name"] for r in self.fleet["regions"]]

    def endpoints_of(self, region: str) -> list[str]:
        for r in self.fleet["regions"]:
            if r["name"] == region:
                return [e["name"] for e in r["endpoints"]]
        raise KeyError(region)

    def web_workers(self) -> list[int]:
        """The pids of the web server's worker processes alive now (from uvicorn's log)."""
        started = re.findall(r"Started server process \[(\d+)\]", self.process("web").text())
        return [int(pid) for pid in dict.fromkeys(started) if os.path.exists(f"/proc/{pid}")]

    def process(self, name: str) -> Process:
        for proc in reversed(self.processes):
            if proc.name == name:
                return proc
        raise KeyError(name)

    def published_table(self) -> dict[str, Any] | None:
        """The table as the DNS servers read it (the key the control loop publishes)."""
        raw = self.redis.get(TABLE_REDIS_KEY)
        return json.loads(raw) if raw else None

    def heartbeat(self, endpoint: str) -> dict[str, Any] | None:
        """The last heartbeat the control plane stored for ``endpoint``."""
        raw = self.redis.hget(redis_key(HEARTBEATS_KEY), endpoint)
        return json.loads(raw) if raw else None

    def settled(self) -> dict[str, Any] | None:
        """The published table when every region is healthy at full ramp, else None."""
        doc = self.published_table()
        if doc is None:
            return None
        regions = doc.get("regions", {})
        ok = set(regions) == set(self.region_names()) and all(
            s.get("state") == "healthy" and s.get("ramp", 0) >= 1.0 for s in regions.values()
        )
        return doc if ok else None

    def wait_settled(self, timeout: float = 40.0) -> dict[str, Any]:
        self.check_running()
        return wait_until(self.settled, timeout, "every region healthy at full ramp", every=0.2)

    def check_running(self) -> None:
        """Fail when a service has exited (not an agent: tests stop those on purpose)."""
        for proc in self.processes:
            if proc.name in SERVICES and not proc.alive():
                raise AssertionError(
                    f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}"
                )

    def tails(self, chars: int = 2500) -> str:
        """The end of every log but those of set-up commands that succeeded."""
        setup = ("migrate", "apply_fleet", "token-")
        return "\n".join(
            f"----- {p.name} (pid {p.pid}, {'running' if p.alive() else p.popen.returncode})\n"
            f"{p.tail(chars)}"
            for p in self.processes
            if not (p.name.startswith(setup) and p.popen.returncode == 0)
        )

    # --- starting and stopping processes --------------------------------------------------

    def spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> Process:
        """Start ``argv`` in a session of its own, output to ``logs/<name>.log``."""
        log = self.logs / f"{name}.log"
        suffix = 2
        while log.exists():
            log, suffix = self.logs / f"{name}-{suffix}.log", suffix + 1
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.environment(), **(extra_env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=end_with_parent,
            )
        proc = Process(name, popen, log)
        self.processes.append(proc)
        return proc

    def spawn_manage(self, name: str, args: list[str]) -> Process:
        return self.spawn(name, [sys.executable, "manage.py", *args])

    def manage(self, name: str, args: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Run a management command to its end; return its output; fail on a non-zero exit."""
        proc = self.spawn_manage(name, args)
        code = self.finish(proc, timeout)
        assert code == 0, f"manage.py {' '.join(args)} exited {code}:\n{proc.tail()}"
        return proc.text()

    def finish(self, proc: Process, timeout: float) -> int:
        """Wait for a process; kill its group when it overstays ``timeout``."""
        try:
            return proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise AssertionError(
                f"{proc.name} did not finish in {timeout:g} s:\n{proc.tail()}"
            ) from None

    def kill(self, proc: Process, sig: signal.Signals = signal.SIGKILL) -> None:
        signal_group(proc.pid, sig)
        if sig is signal.SIGKILL:
            proc.popen.wait(10)

    def stop(self) -> list[str]:
        """End every process group (SIGTERM, then SIGKILL after a grace; a private Redis
        last), drop the database, flush a shared Redis's index; return the processes still
        there after all that (none, normally)."""
        redis_server = [p for p in self.processes if p.name == "redis"]
        left = self._end([p for p in self.processes if p.name != "redis"])
        try:
            if self._redis is not None and not redis_server:
                self.redis.flushdb()  # the claim goes with everything else
            if self._redis is not None:
                self.redis.close()
        finally:
            left += self._end(redis_server)
            if self._db_created:
                drop_database(self.services, self.db_name)
                self._db_created = False
        return left

    def _end(self, processes: list[Process]) -> list[str]:
        for proc in reversed(processes):
            signal_group(proc.pid, signal.SIGCONT)  # a paused agent must hear the SIGTERM
            signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in processes:
            # poll() reaps the leader: a zombie would keep its group looking alive.
            while (proc.popen.poll() is None or group_alive(proc.pid)) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.1)
            if proc.popen.poll() is None or group_alive(proc.pid):
                self.killed.append(proc.name)
                signal_group(proc.pid, signal.SIGKILL)
        left: list[str] = []
        for proc in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(10)
            end = time.monotonic() + 5
            while group_alive(proc.pid) and time.monotonic() < end:
                time.sleep(0.05)
            if proc.popen.poll() is None or group_alive(proc.pid):
                left.append(f"{proc.name} (pgid {proc.pid})")
        return left

    # --- Redis ----------------------------------------------------------------------------

    def start_redis(self) -> None:
        """A Redis server of the cluster's own when ``redis-server`` is installed, else an
        index of REDIS_URL's server claimed for this run.

        An index alone does not isolate: Redis pub/sub ignores database indexes, so the DNS
        server would also take the tables other deployments on the same server publish
        (another run of these tests, the bench, the rest of the suite).
        """
        binary = shutil.which("redis-server")
        if binary is None:
            self.redis_url, self._redis = claim_redis(self.services)
            return
        import redis

        self.redis_port = free_port()
        self._spawn_redis(binary)
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self._redis = redis.Redis.from_url(self.redis_url, socket_timeout=5, decode_responses=True)
        wait_until(lambda: self._redis.ping(), 10, "the cluster's redis-server")

    def _spawn_redis(self, binary: str) -> Process:
        return self.spawn(
            "redis",
            [
                *(binary, "--bind", "127.0.0.1", "--port", str(self.redis_port)),
                *("--save", "", "--appendonly", "no", "--dir", str(self.workdir)),
            ],
        )

    def kill_redis(self) -> None:
        """SIGKILL the cluster's own redis-server: it comes back empty (no persistence)."""
        proc = self.process("redis")
        self.kill(proc)
        proc.name = "redis (killed)"  # a service no longer expected to run

    def restart_redis(self) -> None:
        """Start the cluster's redis-server again on the same port (empty)."""
        binary = shutil.which("redis-server")
        assert binary is not None and self.redis_port, "the cluster has no redis-server of its own"
        self._spawn_redis(binary)
        wait_until(lambda: self._redis.ping(), 10, "the cluster's redis-server to restart")


SERVICES = ("redis", "web", "worker", "beat", "dns")
