"""The endpoint picker checks tokens as the gateway does: junk is refused before any lookup,
and an address failing again and again gets 429. The exchange runs in-process over the real
core (the same harness as ``test_streams_without_done``)."""

from __future__ import annotations

import asyncio

from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpHeaders, ProcessingRequest

from tests.gateway.world import TOKEN, make_core, world_fleet
from trafficmgr.epp.exchange import Exchange, ExchangeSettings
from trafficmgr.requestpath.core import RequestPath


def status_for(core: RequestPath, token: str, client: str) -> int:
    """The status the picker answers a chat's headers with (0: not answered at once)."""
    values = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "authorization": f"Bearer {token}",
        "x-forwarded-for": client,
    }
    items = [HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    message = ProcessingRequest(request_headers=HttpHeaders(headers=HeaderMap(headers=items)))
    (reply,) = asyncio.run(Exchange(core, ExchangeSettings()).handle(message))
    if not reply.HasField("immediate_response"):
        return 0
    return int(reply.immediate_response.status.code)


def test_junk_tokens_never_reach_the_source() -> None:
    core, _ = make_core(world_fleet())
    for i in range(50):
        assert status_for(core, "x" * 60_000 + str(i), f"192.0.2.{i + 1}") == 401
    assert core.tokens.lookups == 0 and core.tokens.held() == 0
    assert status_for(core, TOKEN, "192.0.2.1") == 0  # routed on: the body comes next


def test_one_address_failing_again_and_again_gets_429_another_still_401() -> None:
    core, _ = make_core(world_fleet())
    burst = core.tokens.limits.failures_burst
    codes = [status_for(core, "sk-wrong-client", "203.0.113.7") for _ in range(burst + 2)]
    assert codes == [401] * burst + [429] * 2
    assert status_for(core, "sk-wrong-client", "203.0.113.8") == 401
