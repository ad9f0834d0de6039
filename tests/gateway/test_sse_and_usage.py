"""The relay's reading of upstream bytes: error events are not tokens and are remembered
(a stream failing before its first token is retried), and a whole answer's usage is read
without building the answer, with the same result as reading all of it."""

from __future__ import annotations

import msgspec
import pytest

from trafficmgr.gateway.sse import SseRelay, usage_of, whole_usage

ERROR = b'data: {"error": {"message": "the endpoint went down", "code": "endpoint_down"}}\n\n'
TOKEN = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'


def test_an_error_event_is_remembered_not_counted() -> None:
    relay = SseRelay()
    out, tokens = relay.feed(ERROR + b"data: [DONE]\n\n")
    assert tokens == 0 and relay.tokens == 0
    assert relay.error is not None and b"endpoint_down" in relay.error
    assert relay.done and out.endswith(b"data: [DONE]\n\n")


def test_tokens_then_an_error_event() -> None:
    relay = SseRelay()
    assert relay.feed(TOKEN)[1] == 1 and relay.error is None
    relay.feed(ERROR)
    assert relay.tokens == 1 and relay.error is not None


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"message": {"content": "a b"}}], "usage": '
        b'{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}',
        b'{"choices": []}',
        b'{"usage": null}',
        b'{"usage": {"prompt_tokens": true, "completion_tokens": 1}}',
        b'{"usage": {"prompt_tokens": 1}}',
        b'{"usage": "many"}',
        b"[1, 2]",
        b'"text"',
    ],
)
def test_whole_usage_reads_what_a_full_decode_reads(body: bytes) -> None:
    assert whole_usage(body) == usage_of(msgspec.json.decode(body))


def test_whole_usage_refuses_what_is_not_json() -> None:
    with pytest.raises(msgspec.DecodeError):
        whole_usage(b'{"usage": {"prompt_tokens": 1, ')
