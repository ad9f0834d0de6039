"""An endpoint that sends without end cannot make the gateway buffer it: an endless head,
endless headers, an endless body read whole (a 2xx, or a 4xx passed back) each fail the
attempt as broken, the endpoint is ejected, and the client gets a clean 502 in OpenAI's
error shape that does not echo what the endpoint said."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import openai
import pytest

from tests.gateway.raw_endpoint import RawEndpoint, raw_endpoints
from tests.gateway.test_upstream_faults import MESSAGES, US, pointed
from tests.gateway.world import TOKEN, GatewayThread, ledger_drained, make_core
from trafficmgr.gateway import GatewaySettings
from trafficmgr.routing.types import Fleet

BODY_CAP = 1024 * 1024
# what the two socket buffers of a loopback connection and the client's read-ahead may hold
# beyond what the gateway kept: far below what an unbounded reader takes in seconds
SLACK = 24 * 1024 * 1024


@pytest.fixture
def raw() -> Iterator[Callable[[bytes, bytes], RawEndpoint]]:
    yield from raw_endpoints()


def only(fleet: Fleet, endpoint: RawEndpoint) -> GatewayThread:
    """Return a gateway whose one serving endpoint in us-east is ``endpoint``."""
    core, _ = make_core(
        pointed(fleet, "use-1", endpoint.port),
        region="us-east",
        default_strategy="round_robin",
        consecutive_failures=1,
        base_ejection_s=30,
    )
    core.drain("use-2")
    settings = GatewaySettings(
        first_byte_timeout_s=10, request_timeout_s=10, upstream_max_body_bytes=BODY_CAP
    )
    return GatewayThread(core, settings)


def refused(gw: GatewayThread, stream: bool = False) -> openai.APIStatusError:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=30)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="m1",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=4,
            stream=stream,
            extra_headers=US,
        )
    return caught.value


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
ENDLESS = {
    "head": (OK_HEAD + b"X-Endless: ", b"a" * 65536),
    "headers": (OK_HEAD, b"X-Again: and again\r\n" * 4096),
    "body-2xx": (OK_HEAD + b"\r\n", b" " * 65536),  # close-delimited: never ends
    "body-4xx": (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        b"10000\r\n" + b" " * 65536 + b"\r\n",
    ),
}


@pytest.mark.parametrize("kind", list(ENDLESS))
def test_an_endless_answer_is_cut_and_the_client_gets_a_502(
    fleet: Fleet, raw: Callable[[bytes, bytes], RawEndpoint], kind: str
) -> None:
    endpoint = raw(*ENDLESS[kind])
    with only(fleet, endpoint) as gw:
        error = refused(gw)
        assert error.status_code == 502
        body = error.response.json()["error"]
        assert body["code"] == "upstream_error" and body["type"]
        assert endpoint.requests == 1
        assert endpoint.sent < BODY_CAP + SLACK  # read no further than the limits
        assert gw.core.outlier.ejections_total == 1  # the endpoint counts as broken
        assert ledger_drained(gw.core) == 0


@pytest.mark.parametrize("stream", [False, True])
def test_the_upstream_error_text_is_not_echoed(
    fleet: Fleet, raw: Callable[[bytes, bytes], RawEndpoint], stream: bool
) -> None:
    secret = b'{"error": {"message": "SECRET-UPSTREAM-TEXT at /srv/model.py:42"}}'
    endpoint = raw(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(secret), secret)
    )
    with only(fleet, endpoint) as gw:
        error = refused(gw, stream)
        assert error.status_code == 502
        text = json.dumps(error.response.json())
        assert "SECRET" not in text and "model.py" not in text
        assert "500" in error.response.json()["error"]["message"]  # the kind of failure
