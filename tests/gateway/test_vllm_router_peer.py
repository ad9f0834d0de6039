"""vLLM Router and the gateway over the same simulated servers, both serving the real
``openai`` client: the benchmarks' peer (``bench/gateway_*.py``) is known to work here.

vLLM Router is the ``vllm-router`` wheel, installed by ``scripts/peers/vllm_router.sh`` into its
own virtualenv under ``var/`` (``.ci/run`` runs it); ``TRAFFICMGR_VLLM_ROUTER`` names another
binary. Without it the test is skipped with the reason (a failure under
``TRAFFICMGR_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.gateway.world import TOKEN, US_IP, GatewayThread, ledger_drained, make_core, world_fleet
from trafficmgr.simserver import SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENV_SCRIPT = ROOT / "scripts" / "peers" / "vllm_router.sh"
INSTALLED = ROOT / "var" / "vllm-router-venv" / "bin" / "vllm-router"
MESSAGES = [{"role": "user", "content": "one two three four"}]


def router_binary() -> tuple[Path | None, str]:
    """Return vLLM Router's binary, installing the wheel if needed; else (None, why)."""
    named = os.environ.get("TRAFFICMGR_VLLM_ROUTER")
    if named:
        return (Path(named), "") if Path(named).is_file() else (None, f"no file {named}")
    if not INSTALLED.exists():
        try:
            result = subprocess.run(
                ["bash", str(ENV_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"scripts/peers/vllm_router.sh failed: {exc}"
        if not INSTALLED.exists():
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            return None, "vllm-router wheel not installable: " + " | ".join(tail)
    return INSTALLED, ""


@pytest.fixture(scope="module")
def servers() -> Iterator[SimServerThread]:
    specs = fleet_specs(world_fleet(), base_port=0, only=("use-1", "use-2"))
    with SimServerThread(specs, time_scale=50.0) as sim:
        yield sim


@pytest.fixture(scope="module")
def router(servers: SimServerThread) -> Iterator[str]:
    binary, why = router_binary()
    if binary is None:
        pytest.skip(why)
    port = free_port()
    workers = [servers.url(name) for name in ("use-1", "use-2")]
    cmd = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--policy", "power_of_two",
           "--worker-urls", *workers, "--log-level", "error",
           "--prometheus-port", str(free_port())]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode()[-500:] if proc.stderr else ""
                    pytest.fail(f"vllm-router did not start: {err}")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


def check_openai_client(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=TOKEN, max_retries=2, timeout=30)
    headers = {"X-Forwarded-For": US_IP}
    answer = client.chat.completions.create(
        model="m1",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=5,
        extra_body={"ignore_eos": True},
        extra_headers=headers,
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 5
    assert answer.choices[0].message.content
    chunks = list(
        client.chat.completions.create(
            model="m1",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
            extra_headers=headers,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 6
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_vllm_router_and_gateway_serve_the_openai_client(
    servers: SimServerThread, router: str
) -> None:
    check_openai_client(router)
    fleet = with_addresses(world_fleet(), servers.servers.addresses())
    core, _ = make_core(fleet, region="us-east")
    with GatewayThread(core) as gw:
        check_openai_client(gw.base_url)
        # the accounting closes just after the last byte reaches the client
        assert ledger_drained(gw.core) == 0
