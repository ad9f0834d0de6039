"""The gateway, and the EPP through Envoy, in front of a server the project did not write.

Hugging Face ``transformers serve`` (continuous batching, on CPU) serves a tiny model built
offline (``tiny_model.py``); the real ``openai`` client asks through each front, streaming
(with and without ``stream_options.include_usage``) and not, and gets what it gets from the
server directly. The server ends a stream after its last chunk (``finish_reason`` and usage)
with no ``data: [DONE]`` line: such a stream is whole, so no error event is appended, the
request counts as answered (its output length learned) and the endpoint is never counted
broken or ejected. Without ``var/transformers-venv`` (``scripts/peers/transformers.sh``) the tests
skip with the reason (a failure under ``TRAFFICMGR_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.epp.harness import EnvoyProcess, LoopThread, envoy_binary, fleet_yaml
from tests.gateway.transformers_server import (
    MODEL,
    ROOT,
    TransformersServer,
    tiny_model,
    transformers_venv,
)
from tests.gateway.world import TOKEN, GatewayThread, ledger_drained, make_core
from trafficmgr.contracts import Completion
from trafficmgr.epp.envoy_config import EnvoyOptions, render
from trafficmgr.epp.exchange import ExchangeSettings
from trafficmgr.epp.server import start_server
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.gateway import GatewaySettings
from trafficmgr.requestpath import RequestPath
from trafficmgr.requestpath.credentials import METRICS_TOKEN_ENV, TOKENS_ENV
from trafficmgr.requestpath.source import StaticSource
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

ENDPOINT = "tf-1"
REGION = "eu-west"
MAX_TOKENS = 6
MESSAGES = [{"role": "user", "content": "hello world"}]
PROMPT = "one two three"
# (API, stream, stream_options.include_usage)
CASES = [
    (api, stream, usage)
    for api in ("chat", "completions")
    for stream, usage in ((False, False), (True, False), (True, True))
]
STREAMS = [case for case in CASES if case[1]]
MODES = ("buffered", "streamed", "full_duplex")


@dataclass(frozen=True)
class Answer:
    text: str
    finish_reason: str | None
    completion_tokens: int | None


def body(api: str, stream: bool, include_usage: bool) -> dict[str, Any]:
    asked: dict[str, Any] = {"model": MODEL, "max_tokens": MAX_TOKENS, "stream": stream}
    asked.update({"messages": MESSAGES} if api == "chat" else {"prompt": PROMPT})
    if include_usage:
        asked["stream_options"] = {"include_usage": True}
    return asked


def ask(base_url: str, api: str, stream: bool, include_usage: bool) -> Answer:
    """Ask with the real ``openai`` client; an error event in a stream raises."""
    client = openai.OpenAI(base_url=base_url, api_key=TOKEN, max_retries=0, timeout=60)
    create: Any = client.chat.completions.create if api == "chat" else client.completions.create
    result = create(**body(api, stream, include_usage))
    chunks = list(result) if stream else [result]
    parts, finish, used = [], None, None
    for chunk in chunks:
        for choice in chunk.choices:
            if api == "chat":
                parts.append((choice.message if not stream else choice.delta).content or "")
            else:
                parts.append(choice.text or "")
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            used = chunk.usage.completion_tokens
    return Answer("".join(parts), finish, used)


def raw_events(base_url: str, api: str, include_usage: bool) -> list[dict[str, Any]]:
    """Stream without a client library; return the events, asserting each is a JSON object."""
    path = "chat/completions" if api == "chat" else "completions"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    asked = json.dumps(body(api, True, include_usage)).encode()
    request = urllib.request.Request(f"{base_url}/{path}", asked, headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:  # raises on a non-2xx
        raw = answer.read()
    lines = [line for line in raw.split(b"\n") if line.startswith(b"data:")]
    assert b"data: [DONE]" not in lines  # what this server sends: no end marker
    return [json.loads(line.removeprefix(b"data:")) for line in lines]


def check_stream_whole(events: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    """The stream has the server's events, none appended, and ends on a ``finish_reason``."""
    assert not [e for e in events if "error" in e], events[-1]
    assert len(events) == len(reference)
    assert events[-1]["choices"][0]["finish_reason"] in {"length", "stop"}


class Outcomes:
    """What the core learned from the requests that ended OK, as it reports them.

    A request that ends OK is reported once to the source (``report_completions``, with the
    output tokens the front counted); any other outcome is not, so a request missing here did
    not end OK. Read through the source, not by wrapping the core: the compiled build's core
    takes no attribute assignment.
    """

    def __init__(self, core: RequestPath, source: StaticSource) -> None:
        self._core = core
        self._source = source
        self._seen = len(source.reported)

    def take(self) -> list[Completion]:
        self._core.maintain()  # hands the learner's reports to the source
        taken = list(self._source.reported)[self._seen :]
        self._seen = len(self._source.reported)
        return taken


def check_accounting(core: RequestPath, outcomes: Outcomes, outputs: list[int | None]) -> None:
    """Every request answered OK with the server's own count of its output tokens (in any
    order: ``outputs``); nothing ejected, nothing in flight."""
    taken = outcomes.take()
    assert len(taken) == len(outputs)  # every request ended OK
    counted = [c.output_tokens for c in taken]
    assert sorted(counted, key=str) == sorted(outputs, key=str)
    assert core.outlier.ejected_names() == []
    assert core.outlier.ejections_total == 0
    assert not any(core.in_flight().values())


def stream_output(events: list[dict[str, Any]]) -> int:
    """The output tokens a stream's usage says (this server sends usage unasked)."""
    return int(events[-1]["usage"]["completion_tokens"])


# --- the server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServer]:
    venv, why = transformers_venv()
    if venv is None:
        pytest.skip(why)
    models = tiny_model(venv)
    with TransformersServer(venv, models, tmp_path_factory.mktemp("transformers")) as started:
        yield started


@pytest.fixture(scope="module")
def reference(server: TransformersServer) -> dict[tuple[str, bool, bool], Answer]:
    """The server's own answers (greedy decoding: the same every time)."""
    return {case: ask(server.base_url, *case) for case in CASES}


@pytest.fixture(scope="module")
def reference_events(server: TransformersServer) -> dict[tuple[str, bool], list[dict[str, Any]]]:
    return {(api, usage): raw_events(server.base_url, api, usage) for api, _, usage in STREAMS}


def fleet_text(server: TransformersServer) -> str:
    return fleet_yaml({REGION: [(ENDPOINT, server.address, [MODEL])]})


def test_server_answers_and_ends_streams_without_done(
    server: TransformersServer, reference: dict[tuple[str, bool, bool], Answer]
) -> None:
    assert server.models() == [MODEL]
    for answer in reference.values():
        assert answer.text and answer.finish_reason in {"length", "stop"}
        assert answer.completion_tokens is not None and 0 < answer.completion_tokens <= MAX_TOKENS


# --- the gateway --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(server: TransformersServer) -> Iterator[tuple[GatewayThread, Outcomes]]:
    core, source = make_core(load_fleet_text(fleet_text(server)), region=REGION)
    outcomes = Outcomes(core, source)
    # a loaded machine may take a while over a first token on CPU: that is not a fault here
    settings = GatewaySettings(trusted_proxies=(), first_byte_timeout_s=30)
    with GatewayThread(core, settings) as gw:
        yield gw, outcomes


def test_gateway_lists_the_servers_model(
    server: TransformersServer, gateway: tuple[GatewayThread, Outcomes]
) -> None:
    gw, _ = gateway
    client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0)
    assert [m.id for m in client.models.list()] == server.models()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_gateway_passes_whole_answers(
    case: tuple[str, bool, bool],
    gateway: tuple[GatewayThread, Outcomes],
    reference: dict[tuple[str, bool, bool], Answer],
) -> None:
    gw, outcomes = gateway
    outcomes.take()  # what an earlier test left
    assert ask(gw.base_url, *case) == reference[case]
    assert ledger_drained(gw.core) == 0
    check_accounting(gw.core, outcomes, [reference[case].completion_tokens])


def test_gateway_streams_end_cleanly_and_keep_the_endpoint(
    gateway: tuple[GatewayThread, Outcomes],
    reference_events: dict[tuple[str, bool], list[dict[str, Any]]],
) -> None:
    gw, outcomes = gateway
    outcomes.take()
    rounds = 3  # 12 streams: more than the failures in a row that eject an endpoint
    for _ in range(rounds):
        for api, _, usage in STREAMS:
            check_stream_whole(raw_events(gw.base_url, api, usage), reference_events[api, usage])
    assert ledger_drained(gw.core) == 0
    outputs = [stream_output(reference_events[api, usage]) for api, _, usage in STREAMS]
    check_accounting(gw.core, outcomes, rounds * outputs)


def test_standalone_gateway_over_a_fleet_file(server: TransformersServer, tmp_path: Path) -> None:
    """``python -m trafficmgr.gateway`` (two workers) streams concurrent answers whole."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_text(server))
    port = free_port()
    env = {**os.environ, TOKENS_ENV: TOKEN, METRICS_TOKEN_ENV: "ops-secret"}
    cmd = [sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(fleet),
           "--listen", f"127.0.0.1:{port}", "--workers", "2"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        client = openai.OpenAI(base_url=base_url, api_key=TOKEN, max_retries=0)
        deadline = time.monotonic() + 30
        while True:
            try:
                assert [m.id for m in client.models.list()] == [MODEL]
                break
            except openai.APIConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, "no gateway"
                time.sleep(0.2)
        # concurrent streams: the server batches them (its answers then differ from the
        # references, so only their shape is checked)
        with ThreadPoolExecutor(4) as pool:
            runs = [pool.submit(raw_events, base_url, api, usage) for api, _, usage in STREAMS * 2]
            for run in runs:
                events = run.result()
                assert not [e for e in events if "error" in e], events[-1]
                assert events[-1]["choices"][0]["finish_reason"] in {"length", "stop"}
        answered = f'trafficmgr_gateway_requests_total{{code="200",endpoint="{ENDPOINT}",'
        settled = {
            f'trafficmgr_gateway_in_flight{{endpoint="{ENDPOINT}"}}': 0.0,
            "trafficmgr_gateway_ejections_total": 0.0,
            answered + f'model="{MODEL}"}}': float(2 * len(STREAMS)),
        }
        assert settled_metrics(port, "ops-secret", settled) == settled
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def settled_metrics(port: int, token: str, wanted: dict[str, float]) -> dict[str, float]:
    """The ``wanted`` samples of the gateway's /metrics (all workers) once they match, or as
    they are after 10 s: a worker publishes its figures to the others now and then."""
    deadline = time.monotonic() + 10
    while True:
        headers = {"Authorization": f"Bearer {token}"}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as answer:
            lines = answer.read().decode().splitlines()
        samples = dict(line.rsplit(" ", 1) for line in lines if not line.startswith("#"))
        found = {name: float(samples.get(name, "nan")) for name in wanted}
        if found == wanted or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


# --- Envoy and the EPP --------------------------------------------------------------------


@pytest.fixture(scope="module", params=MODES)
def envoy(
    request: pytest.FixtureRequest,
    server: TransformersServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, RequestPath, Outcomes]]:
    binary, why = envoy_binary()
    if binary is None:
        pytest.skip(why)
    workdir: Path = tmp_path_factory.mktemp("envoy")
    fleet = load_fleet_text(fleet_text(server))
    core, source = make_core(fleet, region=REGION)
    core.maintain()
    outcomes = Outcomes(core, source)
    loop = LoopThread()
    epp_address = f"127.0.0.1:{free_port()}"
    settings = ExchangeSettings(full_duplex=request.param == "full_duplex")
    epp = loop.run(start_server(core, epp_address, settings))
    listen, admin = free_port(), free_port()
    options = EnvoyOptions(
        listen=f"127.0.0.1:{listen}",
        epp=epp_address,
        admin=f"127.0.0.1:{admin}",
        body_mode=request.param,
    )
    config = workdir / "envoy.yaml"
    config.write_text(render(fleet, options))
    proxy = EnvoyProcess(binary, config, admin, workdir / "envoy.log")
    try:
        proxy.wait_ready()
        yield f"http://127.0.0.1:{listen}/v1", core, outcomes
    finally:
        proxy.stop()
        loop.run(epp.stop(0))
        loop.stop()


def idle(core: RequestPath, timeout_s: float = 5.0) -> bool:
    """Wait for the EPP to close every request (Envoy reports a stream's end just after)."""
    return ledger_drained(core, timeout_s) == 0


def test_envoy_and_epp_pass_whole_answers_and_keep_the_endpoint(
    envoy: tuple[str, RequestPath, Outcomes],
    reference: dict[tuple[str, bool, bool], Answer],
    reference_events: dict[tuple[str, bool], list[dict[str, Any]]],
) -> None:
    base_url, core, outcomes = envoy
    outcomes.take()
    for case in CASES:
        assert ask(base_url, *case) == reference[case], case
    for _ in range(2):
        for api, _, usage in STREAMS:
            check_stream_whole(raw_events(base_url, api, usage), reference_events[api, usage])
    assert idle(core)
    outputs = [reference[case].completion_tokens for case in CASES]
    outputs += 2 * [stream_output(reference_events[api, usage]) for api, _, usage in STREAMS]
    check_accounting(core, outcomes, outputs)
