"""Each fault kind, set by the admin path, by the in-process API and by the CLI flag's parser."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.simserver.lab import RawStream, StartServers, chat, post_json, request
from trafficmgr.simserver import Fault, FaultKind, SimServerThread
from trafficmgr.simserver.faults import FaultError, parse_fault_flag

CHAT = "/v1/chat/completions"


def connects(servers: SimServerThread, name: str) -> bool:
    try:
        socket.create_connection(servers.servers.address(name), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


def test_5xx_answers_the_status_and_keeps_health(servers: SimServerThread) -> None:
    url = servers.url("fast-1")
    status, doc, _ = post_json(url, "/admin/fault", {"kind": "5xx", "status": 503})
    assert status == 200 and doc["fault"]["kind"] == "5xx"
    status, doc, _ = post_json(url, CHAT, chat("m-small", 5, 3))
    assert status == 503 and doc["error"]["code"] == "injected_fault"
    assert set(doc["error"]) >= {"message", "type", "code"}
    assert request(url, "GET", "/health")[0] == 200
    post_json(url, "/admin/fault", {"kind": "5xx", "rate": 0.0})
    assert post_json(url, CHAT, chat("m-small", 5, 3))[0] == 200
    post_json(url, "/admin/fault", {"kind": "none"})
    assert post_json(url, CHAT, chat("m-small", 5, 3))[0] == 200


def test_5xx_rate_fails_about_that_share(servers: SimServerThread) -> None:
    url = servers.url("fast-1")
    post_json(url, "/admin/fault", {"kind": "5xx", "rate": 0.5})
    statuses = [post_json(url, CHAT, chat("m-small", 5, 1))[0] for _ in range(60)]
    assert 10 <= statuses.count(500) <= 50 and statuses.count(200) + statuses.count(500) == 60


def test_slow_adds_real_latency(servers: SimServerThread) -> None:
    url = servers.url("fast-1")
    servers.set_fault("fast-1", Fault(FaultKind.SLOW, delay_ms=400))
    start = time.monotonic()
    assert post_json(url, CHAT, chat("m-small", 5, 2))[0] == 200
    assert time.monotonic() - start >= 0.4


def test_stall_withholds_tokens_but_keeps_the_connection(servers: SimServerThread) -> None:
    servers.set_fault("fast-1", Fault(FaultKind.STALL))
    stream = RawStream(servers.url("fast-1"), CHAT, chat("m-small", 5, 20, stream=True))
    try:
        assert b"200 OK" in stream.read_until(b"\r\n\r\n")
        assert b"data:" not in stream.read_for(0.6)  # the model finished long ago: held back
        servers.set_fault("fast-1", Fault())
        assert stream.read_until(b"data: [DONE]").count(b'"content":"') == 21  # role + 20
    finally:
        stream.close()


def test_stall_mid_stream_then_resume(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=1.0)
    stream = RawStream(servers.url("slow-1"), CHAT, chat("m-small", 5, 300, stream=True))
    try:
        stream.read_until(b"data: {")
        servers.set_fault("slow-1", Fault(FaultKind.STALL))
        stream.read_for(0.2)  # what was on its way when the fault came
        assert stream.read_for(0.5) == b""
        servers.set_fault("slow-1", Fault())
        assert b"data:" in stream.read_for(0.3)
    finally:
        stream.close()


def test_stall_holds_a_non_streamed_answer(servers: SimServerThread) -> None:
    servers.set_fault("fast-1", Fault(FaultKind.STALL, duration_s=0.5))
    start = time.monotonic()
    status, doc, _ = post_json(servers.url("fast-1"), CHAT, chat("m-small", 5, 4))
    assert status == 200 and doc["usage"]["completion_tokens"] <= 4
    assert time.monotonic() - start >= 0.45


def test_refuse_closes_the_port_and_reopens_it(servers: SimServerThread) -> None:
    url = servers.url("slow-1")
    assert connects(servers, "slow-1")
    # set from the other endpoint's port: the refused one cannot be reached any more
    post_json(servers.url("fast-1"), "/admin/fault", {"kind": "refuse", "endpoint": "slow-1"})
    assert not connects(servers, "slow-1")
    with pytest.raises(ConnectionRefusedError):
        request(url, "GET", "/health")
    status, doc, _ = request(servers.url("fast-1"), "GET", "/admin/fault")
    assert status == 200
    assert doc["faults"]["slow-1"]["kind"] == "refuse" and doc["faults"]["fast-1"]["kind"] == "none"
    post_json(servers.url("fast-1"), "/admin/fault", {"kind": "none", "endpoint": "slow-1"})
    assert request(url, "GET", "/health")[0] == 200


def test_refuse_closes_idle_keepalive_connections(servers: SimServerThread) -> None:
    """A request on a keep-alive connection opened before ``refuse`` fails fast, never hangs."""
    body = json.dumps(chat("m-small", 5, 2)).encode()
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    message = head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with socket.create_connection(servers.servers.address("fast-1"), timeout=5) as sock:
        sock.sendall(message)
        answer = b""
        while b'"usage"' not in answer:  # the whole first answer, so the connection is idle
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        servers.set_fault("fast-1", Fault(FaultKind.REFUSE))
        start = time.monotonic()
        try:
            sock.sendall(message)
            rest = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            rest = b""
        assert rest == b"" and time.monotonic() - start < 2  # closed by the server, at once


def test_refuse_with_duration_clears_itself(servers: SimServerThread) -> None:
    servers.set_fault("slow-1", Fault(FaultKind.REFUSE, duration_s=0.3))
    assert not connects(servers, "slow-1")
    deadline = time.monotonic() + 10
    while not connects(servers, "slow-1"):
        assert time.monotonic() < deadline, "the port never reopened"
        time.sleep(0.05)


def test_down_fails_health_requests_and_aborts_streams(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=1.0)
    url = servers.url("slow-1")
    stream = RawStream(url, CHAT, chat("m-small", 5, 500, stream=True))
    try:
        stream.read_until(b"data: {")
        servers.set_fault("slow-1", Fault(FaultKind.DOWN))
        tail = stream.read_until(b"data: [DONE]")
        assert b'"code":"endpoint_down"' in tail
    finally:
        stream.close()
    assert request(url, "GET", "/health")[0] == 503
    status, doc, _ = post_json(url, CHAT, chat("m-small", 5, 3))
    assert status == 503 and doc["error"]["type"] == "server_error"
    assert request(url, "GET", "/v1/models")[0] == 503
    assert servers.servers.live("slow-1").flights == {}
    servers.set_fault("slow-1", Fault())
    assert request(url, "GET", "/health")[0] == 200
    assert post_json(url, CHAT, chat("m-small", 5, 3))[0] == 200


def test_fault_flag_sets_a_fault_at_start(start_servers: StartServers) -> None:
    name, fault = parse_fault_flag("fast-1=5xx,status=502")
    servers = start_servers(faults={name: fault})
    assert post_json(servers.url("fast-1"), CHAT, chat("m-small", 5, 3))[0] == 502
    assert post_json(servers.url("slow-1"), CHAT, chat("m-small", 5, 3))[0] == 200


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("euw-1=5xx", Fault(FaultKind.ERROR)),
        ("*=slow,delay_ms=250", Fault(FaultKind.SLOW, delay_ms=250)),
        ("a=refuse,duration_s=5", Fault(FaultKind.REFUSE, duration_s=5)),
        ("a=none", Fault()),
    ],
)
def test_fault_flag_parses(flag: str, expected: Fault) -> None:
    assert parse_fault_flag(flag)[1] == expected


@pytest.mark.parametrize(
    "flag", ["euw-1", "=5xx", "a=boom", "a=5xx,status=200", "a=5xx,rate=2", "a=slow,delay"]
)
def test_bad_fault_flags_are_refused(flag: str) -> None:
    with pytest.raises(FaultError):
        parse_fault_flag(flag)


def test_bad_admin_fault_is_a_400(servers: SimServerThread) -> None:
    url = servers.url("fast-1")
    assert post_json(url, "/admin/fault", {"kind": "explode"})[0] == 400
    assert post_json(url, "/admin/fault", {"kind": "5xx", "colour": 1})[0] == 400
    assert post_json(url, "/admin/fault", {"kind": "down", "endpoint": "nope"})[0] == 404
    assert request(url, "POST", "/admin/fault", b"{not json")[0] == 400
