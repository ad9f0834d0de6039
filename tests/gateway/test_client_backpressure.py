"""A streaming client that stops reading is the client's doing, not the endpoint's: the
endpoint is not counted as stalled (one stall ejects it here), and the request's in-flight
slot frees within the client-write deadline. An endpoint that truly stalls still counts."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import openai
import pytest

from tests.gateway.raw_endpoint import RawEndpoint, raw_endpoints
from tests.gateway.test_upstream_faults import MESSAGES, US, pointed
from tests.gateway.world import TOKEN, US_IP, GatewayThread, ledger_drained, make_core
from trafficmgr.gateway import GatewaySettings
from trafficmgr.gateway.http import ClientLimits
from trafficmgr.routing.types import Fleet

IDLE_S = 0.3  # the endpoint's idle deadline: far shorter than the client's write deadline
WRITE_S = 2.5

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def event(text: str) -> bytes:
    delta = {"choices": [{"index": 0, "delta": {"content": text}}]}
    return chunk(b"data: " + json.dumps(delta).encode() + b"\n\n")


@pytest.fixture
def raw() -> Iterator[Callable[[bytes, bytes], RawEndpoint]]:
    yield from raw_endpoints()


def gateway_over(fleet: Fleet, endpoint: RawEndpoint) -> GatewayThread:
    core, _ = make_core(
        pointed(fleet, "use-1", endpoint.port),
        region="us-east",
        default_strategy="round_robin",
        consecutive_failures=1,
        base_ejection_s=30,
    )
    core.drain("use-2")
    settings = GatewaySettings(
        first_byte_timeout_s=5,
        idle_timeout_s=IDLE_S,
        client_limits=ClientLimits(write_timeout_s=WRITE_S),
    )
    return GatewayThread(core, settings)


def a_stream_never_read(gw: GatewayThread) -> socket.socket:
    """Ask for a stream on a socket with a small receive buffer that is then never read."""
    host, port = gw.origin.removeprefix("http://").rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    body = json.dumps({"model": "m1", "messages": MESSAGES, "stream": True}).encode()
    s.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"X-Forwarded-For: {US_IP}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


def test_a_client_that_stops_reading_frees_its_slot_and_is_not_the_endpoints_stall(
    fleet: Fleet, raw: Callable[[bytes, bytes], RawEndpoint]
) -> None:
    endpoint = raw(SSE_HEAD, event("w" * 16384))  # as fast as the gateway takes it
    with gateway_over(fleet, endpoint) as gw:
        for i in range(2):
            s = a_stream_never_read(gw)
            try:
                deadline = time.monotonic() + 30
                while endpoint.requests <= i and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert gw.core.ledger.total == 1  # the stream is in flight, its client stuck
                # the write deadline (plus the deadline clock's tick) frees the slot
                assert ledger_drained(gw.core, timeout_s=WRITE_S + 5) == 0
            finally:
                s.close()
        assert gw.core.outlier.ejections_total == 0  # the client's back-pressure: no stall


def test_a_client_slower_than_the_idle_deadline_gets_its_whole_stream(
    fleet: Fleet, raw: Callable[[bytes, bytes], RawEndpoint]
) -> None:
    events = 200  # 3 MiB: more than the socket buffers hold, so the gateway's writes wait
    whole = SSE_HEAD + event("w" * 16384) * events + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    endpoint = raw(whole)
    with gateway_over(fleet, endpoint) as gw:
        s = a_stream_never_read(gw)
        try:
            time.sleep(3 * IDLE_S)  # longer than the endpoint may be idle, within WRITE_S
            s.settimeout(10)
            got = bytearray()
            while not got.endswith(b"0\r\n\r\n"):
                data = s.recv(1 << 20)
                if not data:
                    break
                got += data
        finally:
            s.close()
        assert b'"error"' not in got
        assert got.count(b"data: {") == events and b"data: [DONE]" in got
        assert ledger_drained(gw.core) == 0
        assert gw.core.outlier.ejections_total == 0


def test_an_endpoint_that_stalls_still_counts(
    fleet: Fleet, raw: Callable[[bytes, bytes], RawEndpoint]
) -> None:
    endpoint = raw(SSE_HEAD + event("a") + event("b") + event("c"))  # then silence
    with gateway_over(fleet, endpoint) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=10)
        stream = client.chat.completions.create(
            model="m1",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            extra_headers=US,
        )
        seen = 0
        with pytest.raises(openai.APIError, match="no data"):
            for _ in stream:
                seen += 1
        assert seen == 3
        assert ledger_drained(gw.core) == 0
        assert gw.core.outlier.ejections_total == 1
