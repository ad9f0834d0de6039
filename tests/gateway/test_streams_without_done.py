"""A stream that ends cleanly after its ``finish_reason`` (and usage) chunk, without
``data: [DONE]``, is whole: Hugging Face ``transformers serve`` ends every stream that way.
The client gets no error event, the endpoint is not counted toward ejection, and the answer's
length is learned. A stream that ends with neither is still broken."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import openai
import pytest

from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.test_upstream_faults import MESSAGES, US, pointed
from tests.gateway.world import TOKEN, GatewayThread, LoopThread, ledger_drained, make_core
from trafficmgr.gateway import GatewaySettings
from trafficmgr.routing.types import Fleet


@pytest.fixture
def fake() -> Iterator[Callable[[str], FakeUpstream]]:
    """Start fake upstreams on a loop of their own."""
    thread, started = LoopThread(), []

    def start(behaviour: str) -> FakeUpstream:
        upstream = FakeUpstream(behaviour)
        thread.call(upstream.start())
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        thread.call(upstream.stop())
    thread.close()


def stream_once(gw: GatewayThread) -> list[object]:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TOKEN, max_retries=0, timeout=10)
    stream = client.chat.completions.create(
        model="m1",
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=US,
    )
    return list(stream)


def test_a_stream_ending_after_its_finish_reason_is_complete(
    fleet: Fleet, fake: Callable[[str], FakeUpstream]
) -> None:
    upstream = fake("no_done")
    core, source = make_core(
        pointed(fleet, "use-1", upstream.port),
        region="us-east",
        default_strategy="round_robin",
        consecutive_failures=1,  # one broken stream would eject the endpoint
    )
    with GatewayThread(core, GatewaySettings(idle_timeout_s=2.0)) as gw:
        core.drain("use-2")
        for _ in range(3):
            chunks = stream_once(gw)  # an error event would raise APIError here
            assert len(chunks) == 5  # three tokens, the finish chunk, the usage chunk
            assert chunks[-1].usage.completion_tokens == 11  # type: ignore[attr-defined]
        assert ledger_drained(core) == 0
        assert core.outlier.ejections_total == 0
        assert upstream.requests == 3
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(source.reported) < 3:
            core.maintain()  # reports what the core learned
            time.sleep(0.05)
        learned = [c.output_tokens for c in source.reported if c.endpoint == "use-1"]
        assert learned == [11, 11, 11]  # the usage chunk's length, from a complete stream


def test_a_stream_ending_with_neither_is_broken(
    fleet: Fleet, fake: Callable[[str], FakeUpstream]
) -> None:
    upstream = fake("cut")
    core, source = make_core(
        pointed(fleet, "use-1", upstream.port), region="us-east", default_strategy="round_robin"
    )
    with GatewayThread(core, GatewaySettings(idle_timeout_s=2.0)) as gw:
        core.drain("use-2")
        with pytest.raises(openai.APIError):
            stream_once(gw)
        assert ledger_drained(core) == 0
        core.maintain()
        assert [c for c in source.reported if c.endpoint == "use-1"] == []
