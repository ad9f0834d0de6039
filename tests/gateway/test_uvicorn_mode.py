"""The gateway on uvicorn (``http_server="uvicorn"``, ``--http-server uvicorn``) serves as on
its own HTTP layer: the same tests, run here against a gateway on uvicorn, pass unchanged.

They are imported, so pytest runs each here with this module's ``gateway`` fixture (the
``client`` and ``http`` fixtures are built on it): the real ``openai`` client streaming and
not, the refusals (401, 413 declared and undeclared, 404 and 405), ``Expect: 100-continue``,
a client that hangs up mid-stream (its in-flight slot freed, the upstream generation
cancelled), 200 concurrent streams; and the standalone command with the flag, two workers on
one port.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.gateway.test_bad_input import (  # noqa: F401 (pytest runs what is imported)
    http,
    test_missing_or_wrong_token_is_401,
    test_ten_megabyte_prompt_is_413,
)
from tests.gateway.test_http_wire import (  # noqa: F401
    connect,
    post,
    read_response,
    test_a_body_past_the_limit_without_a_length_gets_a_413,
    test_a_chunked_request_body_and_expect_continue,
    test_a_client_hanging_up_mid_stream_frees_its_request,
    test_unknown_routes_and_methods_get_openai_shaped_404_and_405,
)
from tests.gateway.test_openai_client import (  # noqa: F401
    test_chat_completion_with_routing_headers,
    test_completions_endpoint_streams_too,
    test_stream_passes_every_chunk_and_the_usage,
)
from tests.gateway.test_standalone_cli import _fleet_file
from tests.gateway.test_streams_and_disconnects import (  # noqa: F401
    flights,
    long_stream,
    test_client_disconnect_cancels_the_upstream,
    test_two_hundred_concurrent_streams,
)
from tests.gateway.world import GatewayThread, ledger_drained, make_core, world_fleet
from trafficmgr.gateway import GatewaySettings, networks
from trafficmgr.gateway.asgi import UvicornServer
from trafficmgr.routing.types import Fleet
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses
from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gateway(fleet: Fleet) -> Iterator[GatewayThread]:
    """The conftest's gateway, on uvicorn."""
    core, _ = make_core(fleet, consecutive_failures=3, base_ejection_s=0.5)
    settings = GatewaySettings(
        trusted_proxies=networks(["127.0.0.1"]),
        first_byte_timeout_s=3,
        idle_timeout_s=1.0,
        http_server="uvicorn",
    )
    with GatewayThread(core, settings) as gw:
        assert gw.gateway is not None and isinstance(gw.gateway.server, UvicornServer)
        yield gw


def test_an_unknown_http_server_is_refused_naming_the_setting(fleet: Fleet) -> None:
    core, _ = make_core(fleet)
    with pytest.raises(ValueError, match="http_server"):  # noqa: SIM117
        with GatewayThread(core, GatewaySettings(http_server="granian")):
            pass


def test_a_streamed_answer_is_framed_by_uvicorn(gateway: GatewayThread) -> None:
    stream = json.dumps(
        {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    with connect(gateway) as s:
        s.sendall(post(stream))
        status, headers, body = read_response(s, bytearray())
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    assert headers["content-type"] == "text/event-stream"
    assert body.rstrip().endswith(b"data: [DONE]")


def test_the_standalone_command_serves_on_uvicorn(fleet: Fleet, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "trafficmgr.gateway",
            "--fleet", str(_fleet_file(fleet, tmp_path / "fleet.yaml")),
            "--listen", f"127.0.0.1:{port}", "--token", "cli-secret", "--workers", "2",
            "--http-server", "uvicorn",
        ],
        cwd=ROOT,
    )  # fmt: skip
    try:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="cli-secret", max_retries=8
        )
        assert sorted(m.id for m in client.models.list()) == ["m1", "m2"]
        for _ in range(4):
            answer = client.completions.create(model="m1", prompt="a b", max_tokens=2)
            assert answer.choices[0].text
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0
            ).models.list()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


@pytest.fixture(scope="module")
def real_time_sim() -> Iterator[SimServerThread]:
    """The world's endpoints at real speed: a long answer lasts long after its client left."""
    specs = fleet_specs(world_fleet(), base_port=0)
    with SimServerThread(specs, time_scale=1.0, options=ServeOptions(seed=3)) as servers:
        yield servers


@pytest.mark.parametrize("server", ["own", "uvicorn"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_client_gone_mid_answer_cancels_its_request(
    real_time_sim: SimServerThread, server: str, stream: bool
) -> None:
    fleet = with_addresses(world_fleet(), real_time_sim.servers.addresses())
    core, _ = make_core(fleet)
    settings = GatewaySettings(trusted_proxies=networks(["127.0.0.1"]), http_server=server)
    body = json.dumps({**long_stream(), "stream": stream}).encode()
    with GatewayThread(core, settings) as gw:
        s = connect(gw)
        s.sendall(post(body, extra="X-Forwarded-For: 8.8.8.8\r\n"))
        deadline = time.monotonic() + 10
        while not flights(real_time_sim):  # the endpoint is generating the answer
            assert time.monotonic() < deadline, "the request did not reach an endpoint"
            time.sleep(0.01)
        if stream:
            s.recv(1)  # the answer has begun
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        assert ledger_drained(core) == 0  # the handler was cancelled: its slot is free
        deadline = time.monotonic() + 5
        while flights(real_time_sim) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert flights(real_time_sim) == 0  # and the generation upstream stopped
