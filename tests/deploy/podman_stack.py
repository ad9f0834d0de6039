"""docker-compose.yml under Podman: build, bring up in dependency order, inspect, tear down.

The base images come from ``scripts/podman/build-base-images.sh`` (Debian packages, no image
registry) and the project image from ``scripts/podman/build-image.sh`` (the real Dockerfile);
both keep what is current. The stack is the real ``docker-compose.yml`` plus
``deploy/podman/compose.podman.yml`` (the stand-in images) and this test's own override (a
simulated inference server for the gateway to reach). Services start in the order their
``depends_on`` conditions say, waited for here: Podman before 4.6 cannot wait for a
healthcheck, and runs none without systemd, so the stack's healthchecks are run on demand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "podman"
PROJECT = "tmci"
BUILD_TIMEOUT_S = float(os.environ.get("TRAFFICMGR_PODMAN_BUILD_TIMEOUT", "1500"))
SIM_BASE_PORT = 8100


def missing_tools() -> str:
    """Why the stack cannot run here ('' when it can)."""
    absent = [t for t in ("podman", "runc", "debootstrap") if shutil.which(t) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install podman runc debootstrap)"
    if compose_command() is None:
        return "podman-compose is not installed (pip install -e '.[dev]')"
    if os.geteuid() != 0:
        return "debootstrap and the base images need root"
    return ""


def compose_command() -> list[str] | None:
    beside = Path(sys.executable).with_name("podman-compose")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("podman-compose")
    return [found] if found else None


def podman_env() -> dict[str, str]:
    """The environment with CONTAINERS_CONF as scripts/podman/env.sh writes it."""
    out = subprocess.run(
        ["bash", "-c", f". {SCRIPTS / 'env.sh'} && echo $CONTAINERS_CONF"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {**os.environ, "CONTAINERS_CONF": out.stdout.strip()}


def build_images(env: dict[str, str]) -> str:
    """Build (or keep) the base images and trafficmgr:latest; return the scripts' output."""
    lines = []
    for script in ("build-base-images.sh", "build-image.sh"):
        done = subprocess.run(
            ["bash", str(SCRIPTS / script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if done.returncode:
            raise RuntimeError(f"{script} failed:\n{done.stdout}\n{done.stderr}")
        lines.append(done.stdout.strip())
    return "\n".join(lines)


@dataclass
class Stack:
    """One compose project of the repository's docker-compose.yml."""

    env: dict[str, str]
    override: Path
    log: list[str] = field(default_factory=list)

    def compose(self, *args: str, timeout: float = 180) -> str:
        files = ["-f", "docker-compose.yml", "-f", "deploy/podman/compose.podman.yml"]
        argv = [*(compose_command() or []), "-p", PROJECT, *files, "-f", str(self.override)]
        return self._run([*argv, *args], timeout)

    def podman(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        return self._run(["podman", *args], timeout, check)

    def _run(self, argv: Sequence[str], timeout: float, check: bool = True) -> str:
        done = subprocess.run(
            argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        self.log.append(f"$ {' '.join(argv)} -> {done.returncode}")
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(argv)}: {done.returncode}\n{done.stdout}{done.stderr}")
        return done.stdout

    def container(self, service: str) -> str:
        return f"{PROJECT}_{service}_1"

    def up(self, *services: str) -> None:
        self.compose("up", "-d", "--no-deps", "--no-build", *services)

    def healthy(self, service: str, timeout: float) -> None:
        """Run the service's own healthcheck until it passes."""
        until(lambda: self._health_ok(service), timeout, f"{service} healthy")

    def _health_ok(self, service: str) -> bool:
        probe = subprocess.run(
            ["podman", "healthcheck", "run", self.container(service)],
            env=self.env,
            capture_output=True,
            timeout=30,
        )
        return probe.returncode == 0

    def exited(self, service: str, timeout: float) -> dict[str, object]:
        """Wait for a one-shot service to exit; its inspect State and RestartCount."""

        def done() -> bool:
            return self.state(service)["Status"] == "exited"

        until(done, timeout, f"{service} exited")
        return self.state(service)

    def state(self, service: str) -> dict[str, object]:
        doc = json.loads(self.podman("inspect", self.container(service)))[0]
        state: dict[str, object] = dict(doc["State"])
        state["RestartCount"] = doc.get("RestartCount", 0)
        return state

    def exec(self, service: str, *argv: str) -> str:
        return self.podman("exec", self.container(service), *argv, timeout=60)

    def logs(self) -> str:
        """Every container's last lines, for a failure's report."""
        names = self.podman(
            "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}",
            "--format", "{{.Names}}", check=False,
        ).split()  # fmt: skip
        parts = []
        for name in names:
            out = subprocess.run(
                ["podman", "logs", "--tail", "60", name],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            parts.append(f"----- {name} -----\n{out.stdout}{out.stderr}")
        return "\n".join(parts)

    def down(self) -> None:
        self.compose("down", "-v", "-t", "20", timeout=240)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of the project still there."""
        label = f"label=io.podman.compose.project={PROJECT}"
        found = {
            "containers": self.podman("ps", "-a", "--filter", label, "--format", "{{.Names}}"),
            "volumes": self.podman("volume", "ls", "--filter", label, "--format", "{{.Name}}"),
            "networks": self.podman("network", "ls", "--filter", label, "--format", "{{.Name}}"),
        }
        return {kind: names.split() for kind, names in found.items() if names.split()}


def until(ready: Callable[[], bool], timeout: float, what: str, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(every)
