"""OpenTelemetry tracing: the gateway's spans reach a real OTLP/HTTP receiver, continue the
client's ``traceparent``, carry the GenAI attributes and pass their context upstream; with
tracing off the SDK is never imported."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.gateway.test_upstream_faults import pointed
from tests.gateway.world import (
    EU_IP,
    TOKEN,
    US_IP,
    GatewayThread,
    LoopThread,
    make_core,
)
from trafficmgr.fleetfile import dump_fleet
from trafficmgr.gateway import GatewaySettings, networks
from trafficmgr.routing.types import Fleet
from trafficmgr.simserver import Fault, FaultKind, SimServerThread
from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "where is the nearest region"}]
SERVER = "POST /v1/chat/completions"


def traceparent() -> tuple[str, str, str]:
    """Return a client's (header, trace id, span id)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def traced(receiver: OtlpReceiver, **settings: object) -> GatewaySettings:
    base: dict[str, object] = {
        "trusted_proxies": networks(["127.0.0.1"]),
        "first_byte_timeout_s": 3,
        "idle_timeout_s": 1.0,
        "otlp_endpoint": receiver.endpoint,
    }
    return GatewaySettings(**{**base, **settings})  # type: ignore[arg-type]


def client(gw: GatewayThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=20)


def inside(child: ReceivedSpan, parent: ReceivedSpan) -> bool:
    return parent.start_ns <= child.start_ns <= child.end_ns <= parent.end_ns


def test_spans_continue_the_client_trace_with_genai_attributes(
    fleet: Fleet, sim: SimServerThread, receiver: OtlpReceiver
) -> None:
    core, _ = make_core(fleet)
    asked: list[tuple[str, str, str, dict[str, str], int, int]] = []
    with GatewayThread(core, traced(receiver)) as gw:
        for stream in (False, True):
            header, trace_id, span_id = traceparent()
            headers = {"traceparent": header, "X-Forwarded-For": US_IP}
            raw = client(gw).chat.completions.with_raw_response.create(
                model="m1",
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=5,
                stream=stream,
                stream_options={"include_usage": True} if stream else openai.NOT_GIVEN,
                extra_headers=headers,
            )
            answer = raw.parse()
            usage = [c for c in answer if c.usage][-1].usage if stream else answer.usage  # type: ignore[union-attr]
            assert usage is not None
            asked.append(
                (trace_id, span_id, raw.headers["x-request-id"], dict(raw.headers),
                 usage.prompt_tokens, usage.completion_tokens)
            )  # fmt: skip
    ports = {name: int(a[1]) for name, a in sim.servers.addresses().items()}
    assert receiver.content_types == {"application/x-protobuf"}
    for trace_id, span_id, rid, headers, prompt, completion in asked:
        spans = receiver.trace(trace_id)
        assert set(spans) == {SERVER, "decision", "upstream"}
        server, decision, upstream = spans[SERVER], spans["decision"], spans["upstream"]
        assert (server.kind, decision.kind, upstream.kind) == ("server", "internal", "client")
        assert server.parent_span_id == span_id  # the client's span is the parent
        assert decision.parent_span_id == upstream.parent_span_id == server.span_id
        assert inside(decision, server) and inside(upstream, server)
        assert decision.end_ns <= upstream.start_ns
        assert server.resource["service.name"] == "trafficmgr-gateway"
        endpoint, region = headers["x-trafficmgr-endpoint"], headers["x-trafficmgr-region"]
        assert server.attributes["gen_ai.request.model"] == "m1"
        assert server.attributes["gen_ai.request.max_tokens"] == 5
        assert server.attributes["gen_ai.operation.name"] == "chat"
        assert server.attributes["http.response.status_code"] == 200
        assert server.attributes["client.address"] == US_IP
        assert server.attributes["trafficmgr.request_id"] == rid
        assert decision.attributes["trafficmgr.endpoint"] == endpoint
        assert decision.attributes["trafficmgr.region"] == region == "us-east"
        assert decision.attributes["trafficmgr.reason"] == headers["x-trafficmgr-reason"]
        assert upstream.attributes["trafficmgr.endpoint"] == endpoint
        assert upstream.attributes["server.address"] == "127.0.0.1"
        assert upstream.attributes["server.port"] == ports[endpoint]
        assert upstream.attributes["gen_ai.request.model"] == "m1"
        assert upstream.attributes["http.response.status_code"] == 200
        assert upstream.attributes["gen_ai.usage.input_tokens"] == prompt > 0
        assert upstream.attributes["gen_ai.usage.output_tokens"] == completion == 5
        assert upstream.attributes["trafficmgr.attempts"] == 1
        assert not (server.error or decision.error or upstream.error)
        assert "queue" not in spans  # nothing waited


@pytest.fixture
def fake_ok() -> Iterator[FakeUpstream]:
    loop = LoopThread()
    fake = FakeUpstream("ok")
    loop.call(fake.start())
    yield fake
    loop.call(fake.stop())
    loop.close()


def test_retries_are_events_and_the_upstream_gets_the_trace(
    fleet: Fleet, sim: SimServerThread, receiver: OtlpReceiver, fake_ok: FakeUpstream
) -> None:
    sim.set_fault("use-1", Fault(FaultKind.ERROR))
    try:
        world = pointed(fleet, "use-2", fake_ok.port)
        core, _ = make_core(world, region="us-east", default_strategy="round_robin")
        sent: list[tuple[str, str]] = []
        with GatewayThread(core, traced(receiver)) as gw:
            for _ in range(2):  # round robin: one of the two picks use-1 first
                header, trace_id, _span = traceparent()
                raw = client(gw).chat.completions.with_raw_response.create(
                    model="m1",
                    messages=MESSAGES,  # type: ignore[arg-type]
                    max_tokens=3,
                    stream=True,
                    extra_headers={"traceparent": header, "X-Forwarded-For": US_IP},
                )
                assert raw.headers["x-trafficmgr-endpoint"] == "use-2"
                assert list(raw.parse())
                sent.append((trace_id, fake_ok.headers["traceparent"]))
    finally:
        sim.set_fault("use-1", Fault())
    retried = 0
    for trace_id, upstream_header in sent:
        upstream = receiver.trace(trace_id)["upstream"]
        assert upstream_header == f"00-{trace_id}-{upstream.span_id}-01"
        assert upstream.attributes["trafficmgr.endpoint"] == "use-2"
        assert upstream.attributes["server.port"] == fake_ok.port
        failed = [attrs for name, attrs in upstream.events if name == "attempt_failed"]
        assert upstream.attributes["trafficmgr.attempts"] == len(failed) + 1
        for attrs in failed:
            assert attrs["trafficmgr.endpoint"] == "use-1"
            assert attrs["trafficmgr.outcome"] == "server_error"
            assert "500" in attrs["exception.message"]
        retried += len(failed)
    assert retried == 1


def test_an_admission_wait_is_a_queue_span_and_a_hang_up_is_cancelled(
    fleet: Fleet, receiver: OtlpReceiver
) -> None:
    loop = LoopThread()
    fake = FakeUpstream("hang_mid")  # three events, then holds the stream (and the slot)
    loop.call(fake.start())
    world = pointed(fleet, "euc-1", fake.port)
    core, _ = make_core(world, region="eu-central", max_load=0.01)  # one in flight
    ids = {k: traceparent() for k in ("first", "second")}
    try:
        with GatewayThread(core, traced(receiver)) as gw:

            def ask(key: str) -> openai.Stream[object]:
                return client(gw).chat.completions.create(  # type: ignore[return-value]
                    model="m1",
                    messages=MESSAGES,  # type: ignore[arg-type]
                    max_tokens=50,
                    stream=True,
                    extra_headers={"traceparent": ids[key][0], "X-Forwarded-For": EU_IP},
                )

            first = ask("first")
            next(iter(first))  # holds euc-1's only slot
            second: list[object] = []
            waiter = threading.Thread(target=lambda: second.append(next(iter(ask("second")))))
            waiter.start()
            deadline = time.monotonic() + 10
            while core.queue.depth() != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)
            assert not second and core.queue.depth() == 1  # still waiting
            first.close()  # hang up: the slot frees, the second is admitted
            waiter.join(10)
            assert second
            deadline = time.monotonic() + 5
            while core.ledger.total != 1 and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        loop.call(fake.stop())
        loop.close()
    gone = receiver.trace(ids["first"][1])
    assert gone[SERVER].error and gone[SERVER].attributes["error.type"] == "cancelled"
    assert gone["upstream"].error
    waited = receiver.trace(ids["second"][1])
    assert {"queue", "decision", "upstream"} <= set(waited)
    queue, decision = waited["queue"], waited["decision"]
    assert queue.parent_span_id == waited[SERVER].span_id
    assert queue.end_ns - queue.start_ns >= 0.3e9
    assert queue.attributes["trafficmgr.queued_s"] >= 0.3
    assert queue.end_ns <= decision.start_ns
    assert decision.attributes["trafficmgr.endpoint"] == "euc-1"


def test_refusals_are_recorded_with_their_code(
    fleet: Fleet, sim: SimServerThread, receiver: OtlpReceiver
) -> None:
    core, _ = make_core(fleet)
    header, trace_id, _ = traceparent()
    with GatewayThread(core, traced(receiver)) as gw, pytest.raises(openai.NotFoundError):
        client(gw).chat.completions.create(
            model="no-such-model",
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_headers={"traceparent": header},
        )
    spans = receiver.trace(trace_id)
    assert set(spans) == {SERVER, "decision"}
    assert spans[SERVER].attributes["error.type"] == "model_not_found"
    assert spans[SERVER].attributes["http.response.status_code"] == 404
    assert spans["decision"].error and spans["decision"].attributes["error.type"] == (
        "model_not_found"
    )


OFF = """
import sys
from tests.gateway.world import TOKEN, GatewayThread, make_core, world_fleet
from trafficmgr.gateway import GatewaySettings
import openai
core, _ = make_core(world_fleet())
with GatewayThread(core, GatewaySettings()) as gw:
    c = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0)
    try:
        c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    except openai.NotFoundError:
        pass
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
print("loaded:", loaded)
sys.exit(1 if loaded else 0)
"""


def test_tracing_off_never_imports_the_sdk() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run(
        [sys.executable, "-c", OFF], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "loaded: []" in run.stdout


def test_the_standalone_gateway_traces_to_the_endpoint_it_is_given(
    fleet: Fleet, sim: SimServerThread, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    port = free_port()
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(dump_fleet(fleet))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(fleet_file),
            "--listen", f"127.0.0.1:{port}", "--token", "cli-secret",
            "--otlp-endpoint", receiver.endpoint,
        ],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    header, trace_id, span_id = traceparent()
    try:
        cli = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="cli-secret")
        deadline = time.monotonic() + 30
        while True:
            try:
                cli.models.list()
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "gateway did not start"
                time.sleep(0.2)
        answer = cli.completions.create(
            model="m1", prompt="a b", max_tokens=2, extra_headers={"traceparent": header}
        )
        assert answer.choices[0].text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0  # and exports what it holds on the way out
    spans = receiver.trace(trace_id)
    server = spans["POST /v1/completions"]
    assert server.parent_span_id == span_id
    assert server.attributes["gen_ai.operation.name"] == "text_completion"
    assert spans["upstream"].attributes["gen_ai.usage.output_tokens"] == 2
    assert spans["decision"].parent_span_id == server.span_id
