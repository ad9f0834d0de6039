"""The EPP over the project's own request-path core (``RequestPath``), through Envoy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.epp.conftest import MODES, TOKEN, Bench, start_bench, stop_bench
from trafficmgr.epp.decision import Decision
from trafficmgr.requestpath.config import RequestPathConfig
from trafficmgr.requestpath.core import RequestPath
from trafficmgr.requestpath.source import StaticSource
from trafficmgr.requestpath.types import ClientIdentity
from trafficmgr.routing.types import Fleet

pytestmark = pytest.mark.integration

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


@pytest.fixture(scope="module", params=MODES)
def core_bench(
    request: pytest.FixtureRequest, envoy_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Bench, RequestPath]]:
    cores: list[RequestPath] = []

    def build(fleet: Fleet) -> RequestPath:
        source = StaticSource(fleet, {TOKEN: ClientIdentity("tester")})
        cores.append(RequestPath(source, RequestPathConfig(region="eu-west"), seed=1))
        cores[-1].maintain()
        return cores[-1]

    bench = start_bench(request.param, envoy_path, tmp_path_factory.mktemp("core"), build)
    try:
        yield bench, cores[0]
    finally:
        stop_bench(bench)


def idle(core: RequestPath, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(core.in_flight().values()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(core.in_flight().values())


def test_core_satisfies_the_protocol() -> None:
    assert issubclass(RequestPath, Decision)


def test_requests_route_inside_the_region_and_close(core_bench: tuple[Bench, RequestPath]) -> None:
    bench, core = core_bench
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
    for stream in (False, True, False, True):
        raw = api.chat.completions.with_raw_response.create(**CHAT, stream=stream)  # type: ignore[call-overload]
        assert raw.headers["x-trafficmgr-region"] == "eu-west"
        assert raw.headers["x-trafficmgr-endpoint"] in {"u0", "u1", "u2"}
        parsed = raw.parse()
        if stream:
            assert len([c for c in parsed if c.choices]) >= 3
    assert bench.upstream("u3").served == 0
    assert idle(core)


def test_dead_endpoint_is_skipped_and_unknown_model_is_404(
    core_bench: tuple[Bench, RequestPath],
) -> None:
    bench, core = core_bench
    bench.kill("u0")
    try:
        api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
        for _ in range(6):
            raw = api.chat.completions.with_raw_response.create(**CHAT)  # type: ignore[call-overload]
            assert raw.headers["x-upstream"] in {"u1", "u2"}
        with pytest.raises(openai.NotFoundError):
            api.chat.completions.create(**{**CHAT, "model": "nope"})  # type: ignore[call-overload]
    finally:
        bench.restore()
    assert idle(core)
