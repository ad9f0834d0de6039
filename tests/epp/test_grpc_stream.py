"""The ext_proc stream spoken directly over gRPC: streams Envoy cuts short, odd messages,
and the health services, in both body modes."""

from __future__ import annotations

import http.client
import json
import queue
import time
from collections.abc import Iterator

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
    ProtocolConfiguration,
)
from envoy.service.ext_proc.v3.external_processor_pb2_grpc import ExternalProcessorStub
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.epp.conftest import TOKEN, Bench
from trafficmgr.epp.decision import Outcome

pytestmark = pytest.mark.integration

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
STREAMED = ProcessingMode.STREAMED
END = object()


BODY_MODES = {
    "buffered": ProcessingMode.BUFFERED,
    "streamed": ProcessingMode.STREAMED,
    "full_duplex": ProcessingMode.FULL_DUPLEX_STREAMED,
}


def mode_config(bench: Bench) -> ProtocolConfiguration:
    body = BODY_MODES[bench.mode]
    return ProtocolConfiguration(
        request_body_mode=body,
        response_body_mode=body if body == ProcessingMode.FULL_DUPLEX_STREAMED else STREAMED,
        send_body_without_waiting_for_header_response=bench.mode != "full_duplex",
    )


def headers(end_of_stream: bool = False, **extra: str) -> HttpHeaders:
    values = {":method": "POST", ":path": "/v1/chat/completions", **extra}
    values.setdefault("authorization", f"Bearer {TOKEN}")
    items = [HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    return HttpHeaders(headers=HeaderMap(headers=items), end_of_stream=end_of_stream)


class Stream:
    """A Process call fed from a queue, so the test decides when (or whether) to go on."""

    def __init__(self, bench: Bench) -> None:
        self.channel = grpc.insecure_channel(bench.epp_address)
        self.outbox: queue.Queue[object] = queue.Queue()
        self.replies = ExternalProcessorStub(self.channel).Process(self._requests(), timeout=10)

    def _requests(self) -> Iterator[ProcessingRequest]:
        while (item := self.outbox.get()) is not END:
            assert isinstance(item, ProcessingRequest)
            yield item

    def send(self, message: ProcessingRequest) -> None:
        self.outbox.put(message)

    def close(self) -> None:
        self.replies.cancel()
        self.outbox.put(END)
        self.channel.close()


def test_headers_with_end_of_stream_get_400(bench: Bench) -> None:
    stream = Stream(bench)
    try:
        stream.send(
            ProcessingRequest(request_headers=headers(True), protocol_config=mode_config(bench))
        )
        reply = next(stream.replies)
        assert reply.immediate_response.status.code == 400
        assert json.loads(reply.immediate_response.body)["error"]["code"] == "missing_body"
    finally:
        stream.close()
    assert bench.decision.requests == []


def test_stream_closed_after_the_pick_finishes_the_request_once(bench: Bench) -> None:
    stream = Stream(bench)
    try:
        stream.send(
            ProcessingRequest(request_headers=headers(), protocol_config=mode_config(bench))
        )
        body = json.dumps(CHAT).encode()
        stream.send(ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True)))
        first, second = next(stream.replies), next(stream.replies)
        if bench.mode == "full_duplex":  # headers answered with the pick, body given back
            destination = first
            assert second.request_body.response.body_mutation.streamed_response.body == body
        elif bench.mode == "streamed":  # headers held until the body came, chunk kept as is
            destination = first
            assert second.HasField("request_body")
            assert not second.request_body.response.HasField("body_mutation")
        else:  # headers answered at once, the pick rides on the body reply
            destination = second
            assert first.HasField("request_headers")
        lb = destination.dynamic_metadata.fields["envoy.lb"].struct_value
        listed = lb.fields["x-gateway-destination-endpoint"].string_value.split(",")
        assert len(listed) == 3
        assert bench.decision.in_flight == 1
    finally:
        stream.close()  # Envoy gone before any response came back
    assert bench.wait_idle() == 0
    (record,) = bench.decision.records
    assert record.finished == [(Outcome.CANCELLED, None)]


def test_stream_closed_after_the_done_line_counts_as_answered(bench: Bench) -> None:
    """A client that closes on ``data: [DONE]`` can have Envoy reset the stream before the
    body's end reaches the EPP: the answer was whole, so the request is not cancelled."""
    stream = Stream(bench)
    try:
        stream.send(
            ProcessingRequest(request_headers=headers(), protocol_config=mode_config(bench))
        )
        body = json.dumps({**CHAT, "stream": True}).encode()
        stream.send(ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True)))
        status = [
            HeaderValue(key=":status", raw_value=b"200"),
            HeaderValue(key="content-type", raw_value=b"text/event-stream"),
        ]
        stream.send(
            ProcessingRequest(
                response_headers=HttpHeaders(headers=HeaderMap(headers=status), end_of_stream=False)
            )
        )
        chunk = b'data: {"choices": [{"delta": {"content": "one two"}}]}\n\ndata: [DONE]\n\n'
        stream.send(ProcessingRequest(response_body=HttpBody(body=chunk, end_of_stream=False)))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (
            bench.decision.records and bench.decision.records[0].tokens >= 2
        ):
            time.sleep(0.02)
    finally:
        stream.close()  # reset before the body's end_of_stream
    assert bench.wait_idle() == 0
    (record,) = bench.decision.records
    assert record.finished[0][0] == Outcome.OK, record.finished


def test_stream_closed_mid_body_decides_nothing(bench: Bench) -> None:
    stream = Stream(bench)
    try:
        stream.send(
            ProcessingRequest(request_headers=headers(), protocol_config=mode_config(bench))
        )
        stream.send(
            ProcessingRequest(request_body=HttpBody(body=b'{"model": ', end_of_stream=False))
        )
        time.sleep(0.2)
    finally:
        stream.close()
    time.sleep(0.2)
    assert bench.decision.requests == []
    assert bench.decision.in_flight == 0


def test_client_gone_mid_stream_finishes_as_cancelled(bench: Bench) -> None:
    """Through Envoy: the client reads one chunk of a slow stream, then hangs up."""
    bench.upstream("u0").token_delay_s = 0.05
    bench.upstream("u1").token_delay_s = 0.05
    bench.upstream("u2").token_delay_s = 0.05
    bench.upstream("u3").token_delay_s = 0.05
    host, port = bench.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({**CHAT, "max_tokens": 200, "stream": True})
    connection.request(
        "POST",
        "/v1/chat/completions",
        body,
        {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
    )
    response = connection.getresponse()
    assert response.status == 200
    assert response.read1(64)
    connection.sock.close()  # type: ignore[union-attr]
    connection.close()
    assert bench.wait_idle(10) == 0
    (record,) = bench.decision.records
    assert record.finished[0][0] == Outcome.CANCELLED
    assert 0 < record.tokens < 200


@pytest.mark.parametrize(
    "service", ["liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor", ""]
)
def test_health_services_serve(bench: Bench, service: str) -> None:
    with grpc.insecure_channel(bench.epp_address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_unknown_health_service_is_not_found(bench: Bench) -> None:
    with grpc.insecure_channel(bench.epp_address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_envoy_sees_the_epp_healthy(bench: Bench) -> None:
    stats = bench.envoy.stats()
    assert stats["cluster.epp.health_check.success"] >= 1
    assert stats["cluster.epp.health_check.failure"] == 0


def test_streamed_body_without_pipelining_is_refused(bench: Bench) -> None:
    """STREAMED can only route when the body comes without waiting for the headers reply."""
    stream = Stream(bench)
    try:
        config = ProtocolConfiguration(request_body_mode=STREAMED, response_body_mode=STREAMED)
        stream.send(ProcessingRequest(request_headers=headers(), protocol_config=config))
        reply = next(stream.replies)
        assert reply.immediate_response.status.code == 500
        assert json.loads(reply.immediate_response.body)["error"]["code"] == "epp_misconfigured"
    finally:
        stream.close()
    assert bench.decision.requests == []
