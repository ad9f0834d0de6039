"""One reading of a request: the gateway, the endpoint picker and the shared reader agree.

One corpus of OpenAI bodies (good and bad) goes through the gateway (over loopback HTTP) and
the endpoint picker (its ext_proc exchange, in-process) in front of a core that records what
each front asks and answers nothing more; both must refuse alike (status, code, message naming
the field) and read alike (model, prompt, output limit, session, client address: the same
input tokens and prefix blocks for the core). One corpus of SSE streams, fed in every split,
goes through the gateway's relay, the picker's reader and the shared reader: the same output
tokens, usage and verdict on the stream's end.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterator

import pytest
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
)

from tests.gateway.world import TOKEN, GatewayThread, make_core, world_fleet
from trafficmgr.epp.exchange import Exchange, ExchangeSettings
from trafficmgr.epp.usage import ResponseReader
from trafficmgr.gateway import GatewaySettings
from trafficmgr.gateway.sse import SseRelay
from trafficmgr.requestpath.parse import Parsed, parse_info
from trafficmgr.requestpath.reading import (
    BrokenStream,
    StreamReader,
    chat_of_path,
    client_address,
    networks,
    read_request,
)
from trafficmgr.requestpath.types import Plan, Refusal, RequestInfo
from trafficmgr.routing.prompt import count_tokens, word_prefix_hashes

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
HI = [{"role": "user", "content": "hello there"}]
BODIES: list[tuple[str, object]] = [
    (CHAT, {"model": "m1", "messages": HI}),
    (CHAT, {"model": "m1", "messages": HI, "max_tokens": 40, "stream": True}),
    (CHAT, {"model": "m1", "messages": HI, "max_completion_tokens": 9, "max_tokens": 99}),
    (CHAT, {"model": "m1", "messages": HI, "max_tokens": None, "user": "u-7"}),
    (
        CHAT,
        {"model": "m1", "messages": HI, "stream": True, "stream_options": {"include_usage": True}},
    ),
    (
        CHAT,
        {
            "model": "m1",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a b"}]}],
        },
    ),
    (COMPLETIONS, {"model": "m1", "prompt": "one two three"}),
    (COMPLETIONS, {"model": "m1", "prompt": ["one two", "three"]}),
    (COMPLETIONS, {"model": "m1", "prompt": [101, 2023, 2003, 1037]}),  # token ids
    (COMPLETIONS, {"model": "m1", "prompt": [[101, 2023], [2003]]}),
    # refused
    (CHAT, b"{not json"),
    (CHAT, b"[1, 2]"),
    (CHAT, {"messages": HI}),  # no model
    (CHAT, {"model": "", "messages": HI}),
    (CHAT, {"model": 7, "messages": HI}),
    (CHAT, {"model": "m1", "messages": HI, "max_tokens": 0}),
    (CHAT, {"model": "m1", "messages": HI, "max_tokens": 2_000_000}),
    (CHAT, {"model": "m1", "messages": HI, "max_tokens": "9"}),
    (CHAT, {"model": "m1", "messages": HI, "max_completion_tokens": True}),
    (CHAT, {"model": "m1", "messages": HI, "stream": "yes"}),
    (CHAT, {"model": "m1", "messages": HI, "stream_options": "usage"}),
    (CHAT, {"model": "m1", "messages": HI, "stream_options": {"include_usage": 1}}),
    (CHAT, {"model": "m1", "messages": HI, "user": 5}),
    (CHAT, {"model": "m1", "messages": []}),
    (CHAT, {"model": "m1", "messages": ["hi"]}),
    (COMPLETIONS, {"model": "m1", "prompt": []}),
    (COMPLETIONS, {"model": "m1", "prompt": [1, "a"]}),
    (COMPLETIONS, {"model": "m1", "prompt": [[1], []]}),
    (COMPLETIONS, {"model": "m1"}),
]
TRUSTED = networks(["127.0.0.0/8", "10.0.0.0/8"])
# what a client behind a trusted proxy sent; the picker sees Envoy's peer appended
FORWARDED = ["81.2.69.142, 10.0.0.5", "6.6.6.6, 81.2.69.142", "10.0.0.5", "bogus, 10.0.0.5"]


class RecordingCore:
    """Wraps a real core: records what a front asks, answers 503 so nothing goes upstream."""

    def __init__(self) -> None:
        self.core, _ = make_core(world_fleet())
        self.asked: list[RequestInfo] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.core, name)

    async def admit(self, info: RequestInfo) -> Plan | Refusal:
        self.asked.append(info)
        return Refusal(503, "recorded", "recorded", retry_after_s=1)


def raw(body: object) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


@pytest.fixture(scope="module")
def recorder() -> RecordingCore:
    return RecordingCore()


@pytest.fixture(scope="module")
def gateway(recorder: RecordingCore) -> Iterator[GatewayThread]:
    settings = GatewaySettings(trusted_proxies=TRUSTED)
    with GatewayThread(recorder, settings) as gw:  # type: ignore[arg-type]
        yield gw


def through_gateway(
    gw: GatewayThread, recorder: RecordingCore, path: str, body: bytes, forwarded: str
) -> tuple[int, str, str, RequestInfo | None]:
    conn = http.client.HTTPConnection("127.0.0.1", int(gw.base_url.split(":")[2].split("/")[0]))
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "X-Forwarded-For": forwarded,
        "x-session-id": "",
    }
    before = len(recorder.asked)
    conn.request("POST", path, body, headers)
    reply = conn.getresponse()
    error = json.loads(reply.read())["error"]
    conn.close()
    info = recorder.asked[-1] if len(recorder.asked) > before else None
    return reply.status, error["code"], error["message"], info


def through_picker(
    recorder: RecordingCore, path: str, body: bytes, forwarded: str
) -> tuple[int, str, str, RequestInfo | None]:
    values = {
        ":method": "POST",
        ":path": path,
        "authorization": f"Bearer {TOKEN}",
        "x-forwarded-for": f"{forwarded}, 127.0.0.1",  # Envoy appends its peer
    }
    items = [HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    exchange = Exchange(recorder, ExchangeSettings(trusted_proxies=TRUSTED))  # type: ignore[arg-type]
    before = len(recorder.asked)

    async def run() -> list[object]:
        await exchange.handle(
            ProcessingRequest(request_headers=HttpHeaders(headers=HeaderMap(headers=items)))
        )
        return list(
            await exchange.handle(
                ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True))
            )
        )

    (reply,) = asyncio.run(run())
    immediate = reply.immediate_response  # type: ignore[attr-defined]
    error = json.loads(immediate.body)["error"]
    info = recorder.asked[-1] if len(recorder.asked) > before else None
    return immediate.status.code, error["code"], error["message"], info


def cost(info: RequestInfo) -> Parsed | Refusal:
    return parse_info(info, "round_robin", frozenset({"m1"}))


@pytest.mark.parametrize(("path", "body"), BODIES, ids=[str(i) for i in range(len(BODIES))])
def test_both_fronts_refuse_and_cost_a_body_alike(
    gateway: GatewayThread, recorder: RecordingCore, path: str, body: object
) -> None:
    data = raw(body)
    shared = read_request(data, chat_of_path(path))
    for forwarded in FORWARDED:
        g = through_gateway(gateway, recorder, path, data, forwarded)
        p = through_picker(recorder, path, data, forwarded)
        if isinstance(shared, Refusal):
            assert g[:3] == p[:3] == (shared.status, shared.code, shared.message)
            assert g[3] is None and p[3] is None
            continue
        assert g[:2] == p[:2] == (503, "recorded")
        assert g[3] is not None and p[3] is not None
        one, two = g[3], p[3]
        same = ("model", "prompt", "max_output_tokens", "session_id", "client_ip")
        assert {k: getattr(one, k) for k in same} == {k: getattr(two, k) for k in same}
        assert one.prompt == shared.prompt and one.max_output_tokens == shared.max_tokens
        assert one.client_ip == client_address("127.0.0.1", forwarded, TRUSTED)
        assert cost(one) == cost(two)
        parsed = cost(one)
        assert isinstance(parsed, Parsed)
        assert parsed.input_tokens == count_tokens(shared.prompt)
        assert parsed.prefix_hashes == word_prefix_hashes(shared.prompt.split())


def test_token_id_prompts_cost_one_token_per_id() -> None:
    read = read_request(raw({"model": "m1", "prompt": [5, 6, 7]}), False)
    assert not isinstance(read, Refusal) and count_tokens(read.prompt) == 3


def test_client_address_walks_trusted_proxies_from_the_right() -> None:
    assert client_address("127.0.0.1", "81.2.69.142, 10.0.0.5", TRUSTED) == "81.2.69.142"
    assert client_address("127.0.0.1", "6.6.6.6, 81.2.69.142", TRUSTED) == "81.2.69.142"
    assert client_address("127.0.0.1", "10.0.0.5", TRUSTED) == "10.0.0.5"  # all trusted
    assert client_address("127.0.0.1", "bogus, 10.0.0.5", TRUSTED) == "10.0.0.5"
    assert client_address("81.2.69.142", "6.6.6.6", TRUSTED) == "81.2.69.142"  # untrusted peer
    assert client_address("127.0.0.1", "6.6.6.6", ()) == "127.0.0.1"  # trusts nobody
    assert client_address("127.0.0.1", "x" * 70_000, TRUSTED) == "127.0.0.1"


def sse(doc: object) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def delta(text: str, finish: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


ROLE = sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
USAGE = sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 11}})
DONE = b"data: [DONE]\n\n"
STREAMS: dict[str, tuple[bytes, int, tuple[int, int] | None, bool]] = {
    # name: (body, tokens counted, usage, complete once the body ended cleanly)
    "vllm": (
        ROLE + delta("hel") + delta("lo") + delta(" world") + delta("", "stop") + DONE,
        3,
        None,
        True,
    ),
    "vllm_usage": (ROLE + delta("a") + delta(" b", "length") + USAGE + DONE, 2, (5, 11), True),
    "batched": (ROLE + delta("one two three") + delta(" four five", "stop") + DONE, 5, None, True),
    "no_done_usage": (ROLE + delta("a b") + delta(" c", "stop") + USAGE, 3, (5, 11), True),
    "no_done_finish": (ROLE + delta("a") + delta("", "stop"), 1, None, True),
    "crlf_no_done": ((ROLE + delta("a", "stop")).replace(b"\n", b"\r\n"), 1, None, True),
    "cut": (ROLE + delta("a") + delta(" b"), 2, None, False),
    "cut_mid_event": (ROLE + delta("a", "stop")[:-2], 0, None, False),
    "comments_and_fields": (
        b": ping\n\nevent: message\nid: 1\n" + delta("x", "stop") + DONE,
        1,
        None,
        True,
    ),
    "text_completion": (
        sse({"choices": [{"text": "p q r", "finish_reason": "stop"}]}) + DONE,
        3,
        None,
        True,
    ),
    "tool_call": (
        sse({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]})
        + delta("", "tool_calls")
        + DONE,
        1,
        None,
        True,
    ),
    "garbage": (ROLE + b"<html>\n\n" + DONE, 0, None, False),
}


def splits(body: bytes) -> Iterator[list[bytes]]:
    yield [body]
    yield [body[i : i + 1] for i in range(len(body))]
    for size in (3, 7, 64):
        yield [body[i : i + size] for i in range(0, len(body), size)]


def relay_reading(parts: list[bytes]) -> tuple[int, tuple[int, int] | None, bool, bytes]:
    relay = SseRelay()
    out = b""
    try:
        for part in parts:
            out += relay.feed(part)[0]
    except Exception:
        return relay.tokens, None, False, out
    usage = relay.usage()
    return (
        relay.tokens,
        (usage.prompt_tokens, usage.completion_tokens) if usage else None,
        relay.complete(),
        out,
    )


def picker_reading(parts: list[bytes]) -> tuple[int, tuple[int, int] | None, bool]:
    reader = ResponseReader(streaming=True)
    tokens = sum(reader.feed(part) for part in parts)
    usage = reader.finish()
    return (
        tokens,
        (usage.prompt_tokens, usage.completion_tokens) if usage else None,
        not reader.broken(),
    )


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_reader_counts_and_judges_a_stream_alike(name: str) -> None:
    body, tokens, usage, complete = STREAMS[name]
    for parts in splits(body):
        relayed = relay_reading(parts)
        assert relayed[:3] == (tokens, usage, complete), parts
        assert picker_reading(parts) == (tokens, usage, complete), parts
        if name != "garbage":  # every complete event forwarded, in order, unchanged
            assert body.startswith(relayed[3])
            held = body[len(relayed[3]) :].replace(b"\r\n", b"\n")
            assert b"\n\n" not in held  # only part of an event is held back


def test_a_long_event_in_one_byte_pieces_is_one_event() -> None:
    reader = StreamReader()
    event = delta("w " * 30_000)
    for i in range(len(event) - 2):
        assert reader.feed(event[i : i + 1]) == (b"", 0)
    assert reader.feed(event[-2:]) == (event, 30_000)


def test_an_event_over_the_limit_breaks_the_stream() -> None:
    reader = StreamReader()
    with pytest.raises(BrokenStream, match="longer than 1 MiB"):
        for _ in range(2 << 10):
            reader.feed(b"data: " + b"x" * 1024)
