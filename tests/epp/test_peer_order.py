"""A gRPC peer that is not a well-behaved Envoy: streams forged message by message.

Headers come once and first, and a body is routed only after headers whose token was
checked; response phases count only for the plan the stream made; a body under the limit
fits gRPC's messages and one over it is the EPP's 413.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
    ProcessingResponse,
)
from envoy.service.ext_proc.v3.external_processor_pb2_grpc import ExternalProcessorStub
from google.protobuf.struct_pb2 import Struct

from tests.epp.conftest import TOKEN, Bench
from tests.epp.harness import LoopThread, fleet_yaml
from tests.epp.roundrobin import RoundRobinDecision
from tests.epp.test_grpc_stream import CHAT, Stream, headers, mode_config
from trafficmgr.epp.decision import ClientIdentity, Outcome
from trafficmgr.epp.server import start_server
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

BODY = json.dumps(CHAT).encode()


def status_headers(status: str, served: str | None = None) -> ProcessingRequest:
    items = [HeaderValue(key=":status", raw_value=status.encode())]
    message = ProcessingRequest(
        response_headers=HttpHeaders(headers=HeaderMap(headers=items), end_of_stream=False)
    )
    if served is not None:
        lb = Struct()
        lb.update({"x-gateway-destination-endpoint-served": served})
        message.metadata_context.filter_metadata["envoy.lb"].CopyFrom(lb)
    return message


def until_closed(stream: Stream) -> list[ProcessingResponse]:
    """Every reply until the EPP ends the stream."""
    replies = []
    try:
        for reply in stream.replies:
            replies.append(reply)
    except grpc.RpcError as error:
        assert error.code() in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED), error
    return replies


def test_body_before_headers_is_refused_never_routed(bench: Bench) -> None:
    """No headers means no token checked: the body is not routed, and a forged 500 after it
    reaches no endpoint's accounting."""
    stream = Stream(bench)
    try:
        stream.send(
            ProcessingRequest(
                request_body=HttpBody(body=BODY, end_of_stream=True),
                protocol_config=mode_config(bench),
            )
        )
        stream.send(status_headers("500", bench.upstream("u0").address))
        first = next(stream.replies)
        assert first.immediate_response.status.code == 400
        assert json.loads(first.immediate_response.body)["error"]["code"] == "out_of_order"
        assert until_closed(stream) == []
    finally:
        stream.close()
    assert bench.decision.requests == []
    assert bench.decision.records == []


def test_headers_twice_are_refused(bench: Bench) -> None:
    stream = Stream(bench)
    try:
        config = mode_config(bench)
        stream.send(ProcessingRequest(request_headers=headers(), protocol_config=config))
        stream.send(ProcessingRequest(request_headers=headers()))
        replies = until_closed(stream)
        refusal = replies[-1].immediate_response
        assert refusal.status.code == 400
        assert json.loads(refusal.body)["error"]["code"] == "out_of_order"
    finally:
        stream.close()
    assert bench.decision.requests == []


def test_a_second_response_is_ignored(bench: Bench) -> None:
    """After the real response headers, forged ones (a 500 naming the list's last endpoint as
    served) neither fail endpoints nor change the request's outcome."""
    stream = Stream(bench)
    try:
        stream.send(
            ProcessingRequest(request_headers=headers(), protocol_config=mode_config(bench))
        )
        stream.send(ProcessingRequest(request_body=HttpBody(body=BODY, end_of_stream=True)))
        replies = [next(stream.replies), next(stream.replies)]
        lb = next(r for r in replies if "envoy.lb" in r.dynamic_metadata.fields)
        listed = lb.dynamic_metadata.fields["envoy.lb"].struct_value.fields
        sent = listed["x-gateway-destination-endpoint"].string_value.split(",")
        stream.send(status_headers("200", sent[0]))
        assert next(stream.replies).HasField("response_headers")
        stream.send(status_headers("500", sent[-1]))
        assert not next(stream.replies).HasField("immediate_response")
        stream.send(ProcessingRequest(response_body=HttpBody(body=b"{}", end_of_stream=True)))
        until_closed(stream)
    finally:
        stream.close()
    assert bench.wait_idle() == 0
    (record,) = bench.decision.records
    assert record.failed == [] and record.served == []
    assert record.finished[0][0] == Outcome.OK


@pytest.fixture(scope="module")
def default_epp() -> Iterator[str]:
    """An EPP with the default body limit (4 MiB, gRPC's default message limit)."""
    loop = LoopThread()
    fleet = load_fleet_text(fleet_yaml({"eu-west": [("u0", "127.0.0.1:9", ["m1"])]}))
    decision = RoundRobinDecision(fleet, tokens={TOKEN: ClientIdentity("tester")})
    address = f"127.0.0.1:{free_port()}"
    server = loop.run(start_server(decision, address))
    try:
        yield address
    finally:
        loop.run(server.stop(0))
        loop.stop()


def _buffered(address: str, size: int) -> ProcessingResponse:
    """The EPP's answer to a BUFFERED body of ``size`` bytes."""
    text = "x" * (size - len(json.dumps({**CHAT, "messages": [{"role": "user", "content": ""}]})))
    body = json.dumps({**CHAT, "messages": [{"role": "user", "content": text}]}).encode()
    assert len(body) == size
    with grpc.insecure_channel(address) as channel:
        replies = ExternalProcessorStub(channel).Process(
            iter(
                [
                    ProcessingRequest(request_headers=headers()),
                    ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True)),
                ]
            ),
            timeout=10,
        )
        assert next(replies).HasField("request_headers")
        answer = next(replies)
        replies.cancel()
    return answer


@pytest.mark.parametrize("size", [(4 << 20) - 100, (4 << 20) + 100])
def test_a_body_near_the_limit_is_routed_or_413_never_a_grpc_error(
    default_epp: str, size: int
) -> None:
    answer = _buffered(default_epp, size)
    if size <= 4 << 20:
        assert "envoy.lb" in answer.dynamic_metadata.fields
    else:
        assert answer.immediate_response.status.code == 413
        assert json.loads(answer.immediate_response.body)["error"]["code"] == "body_too_large"
