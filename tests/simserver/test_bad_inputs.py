"""Bad requests get OpenAI-shaped errors naming the field; hung-up clients leave nothing behind."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.simserver.lab import RawStream, StartServers, chat, post_json, request
from trafficmgr.simserver import SimServerThread

CHAT = "/v1/chat/completions"


def assert_error(result: tuple[int, Any, dict[str, str]], status: int, param: str | None) -> str:
    got, doc, _ = result
    assert got == status, doc
    error = doc["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and isinstance(error["code"], str)
    assert error["param"] == param
    return str(error["code"])


def test_malformed_json(servers: SimServerThread) -> None:
    url = servers.url("slow-1")
    result = request(url, "POST", CHAT, b'{"model": "m-small", "messages": [')
    assert assert_error(result, 400, None) == "invalid_json"
    assert_error(request(url, "POST", CHAT, b"[1, 2]"), 400, None)


def test_unknown_model_is_404(servers: SimServerThread) -> None:
    result = post_json(servers.url("fast-1"), CHAT, chat("m-big", 3, 3))
    assert assert_error(result, 404, "model") == "model_not_found"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat("m-small", 3, 0), "max_tokens"),
        (chat("m-small", 3, 10**7), "max_tokens"),
        (chat("m-small", 3, -5), "max_tokens"),
        (chat("m-small", 3, "ten"), "max_tokens"),
        (chat("m-small", 3, 0, max_completion_tokens=0), "max_completion_tokens"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m-small"}, "messages"),
        ({"model": "m-small", "messages": []}, "messages"),
        ({"model": "m-small", "messages": [{"content": "x"}]}, "messages"),
        ({"model": "m-small", "messages": [{"role": "user", "content": 5}]}, "messages"),
        (chat("m-small", 3, 3, stream="yes"), "stream"),
        (chat("m-small", 3, 3, ignore_eos=1), "ignore_eos"),
        (chat("m-small", 3, 3, stream=True, stream_options=[]), "stream_options"),
        (
            chat("m-small", 3, 3, stream_options={"include_usage": "y"}),
            "stream_options.include_usage",
        ),
        (chat("m-small", 3, 3, n=2), "n"),
        (chat("m-small", 3, 3, min_tokens=4), "min_tokens"),
        (chat("m-small", 3, 3, seed=1.5), "seed"),
    ],
)
def test_bad_chat_fields_name_the_field(
    servers: SimServerThread, body: dict[str, Any], param: str
) -> None:
    assert_error(post_json(servers.url("slow-1"), CHAT, body), 400, param)


@pytest.mark.parametrize("prompt", [None, 5, [], ["a", "b"], [1, "x"], {"text": "x"}])
def test_bad_completion_prompt(servers: SimServerThread, prompt: Any) -> None:
    body = {"model": "m-small", "prompt": prompt, "max_tokens": 3}
    assert_error(post_json(servers.url("slow-1"), "/v1/completions", body), 400, "prompt")


def test_token_id_prompt_counts_ids(servers: SimServerThread) -> None:
    body = {"model": "m-small", "prompt": [101, 7, 7, 2], "max_tokens": 2, "ignore_eos": True}
    status, doc, _ = post_json(servers.url("slow-1"), "/v1/completions", body)
    assert status == 200 and doc["usage"]["prompt_tokens"] == 4


def test_prompt_longer_than_the_context(start_servers: StartServers) -> None:
    servers = start_servers(max_model_len=100)
    result = post_json(servers.url("slow-1"), CHAT, chat("m-small", 100, 1))
    assert assert_error(result, 400, "messages") == "context_length_exceeded"
    assert post_json(servers.url("slow-1"), CHAT, chat("m-small", 60, 40))[0] == 200


def test_ten_megabyte_prompt_is_413(servers: SimServerThread) -> None:
    body = chat("m-small", 0, 3)
    body["messages"][0]["content"] = "word " * (2 * 1024 * 1024)  # 10 MiB
    result = post_json(servers.url("slow-1"), CHAT, body)
    assert assert_error(result, 413, None) == "body_too_large"
    assert post_json(servers.url("slow-1"), CHAT, chat("m-small", 3, 3))[0] == 200


def test_chunked_body_over_the_limit_is_413(start_servers: StartServers) -> None:
    servers = start_servers(max_body_bytes=2048)
    chunk = b'{"model": "m-small", "messages": [{"role": "user", "content": "' + b"w " * 2000
    upload = (  # chunked: no Content-Length to refuse it by
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\n\r\n" + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    )
    stream = RawStream(servers.url("slow-1"), CHAT, raw=upload)
    try:
        head = stream.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413")
    finally:
        stream.close()


def test_unknown_path_and_method(servers: SimServerThread) -> None:
    url = servers.url("slow-1")
    assert_error(request(url, "GET", "/v2/whatever"), 404, None)
    assert_error(request(url, "GET", CHAT), 405, None)


def wait_idle(servers: SimServerThread, name: str) -> dict[str, float]:
    """Poll /metrics until nothing runs or waits; return the abort counts seen."""
    deadline = time.monotonic() + 10
    while True:
        _, text, _ = request(servers.url(name), "GET", "/metrics")
        values = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }
        busy = sum(
            v
            for k, v in values.items()
            if k.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))
        )
        if busy == 0:
            return {k: v for k, v in values.items() if 'finished_reason="abort"' in k}
        assert time.monotonic() < deadline, f"still busy: {busy}"
        time.sleep(0.05)


def test_client_disconnect_mid_stream_leaks_nothing(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=1.0)
    streams = [
        RawStream(servers.url("slow-1"), CHAT, chat("m-small", 5, 3000, stream=True))
        for _ in range(10)  # 8 slots: two of them wait
    ]
    for stream in streams[:8]:
        stream.read_until(b"data: {")
    for stream in streams:
        stream.close()
    aborts = wait_idle(servers, "slow-1")
    assert sum(aborts.values()) == 10
    live = servers.servers.live("slow-1")
    assert live.flights == {} and live.server.kv_used == 0
    assert servers.servers.live("slow-1").server.waiting_input == 0


def test_client_disconnect_while_waiting_for_a_whole_answer(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=1.0)
    stream = RawStream(servers.url("slow-1"), CHAT, chat("m-small", 5, 3000))
    time.sleep(0.2)
    stream.close()
    assert sum(wait_idle(servers, "slow-1").values()) == 1
