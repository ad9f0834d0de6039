"""The gateway over the real control plane: stored fleet, client tokens, completions shared.

``manage.py gateway`` hands the request-path core a ``DjangoControlPlane``; here the same core
runs in-process over the test database and the simulated servers, and the real ``openai``
client talks to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from django.utils import timezone

from regions import hotstate
from regions.access.issue import TokenError, create_token
from regions.decisions.source import DjangoControlPlane
from regions.fleet.plan import apply_plan, plan_fleet
from tests.gateway.world import EU_REGIONS, GatewayThread, world_fleet
from trafficmgr.gateway import GatewaySettings, networks
from trafficmgr.requestpath import RequestPath, RequestPathConfig
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServerThread]:
    specs = fleet_specs(world_fleet(), base_port=0)
    with SimServerThread(specs, time_scale=50.0, options=ServeOptions(seed=5)) as servers:
        yield servers


@pytest.fixture
def gateway(sim: SimServerThread) -> Iterator[tuple[GatewayThread, RequestPath]]:
    apply_plan(plan_fleet(with_addresses(world_fleet(), sim.servers.addresses())), force=True)
    core = RequestPath(DjangoControlPlane(), RequestPathConfig())
    core.maintain()
    settings = GatewaySettings(trusted_proxies=networks(["127.0.0.1"]))
    with GatewayThread(core, settings) as gw:
        yield gw, core


def _client(gw: GatewayThread, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=secret, max_retries=0, timeout=20)


def _ask(client: openai.OpenAI, **headers: str) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="m1",
        messages=[{"role": "user", "content": "say something short"}],
        max_tokens=8,
        extra_body={"ignore_eos": True},
        extra_headers=headers,
    )


def test_a_client_token_is_served_and_its_completion_reaches_the_hot_state(
    gateway: tuple[GatewayThread, RequestPath],
) -> None:
    gw, core = gateway
    _, secret = create_token("app", "client", tenant="acme")
    raw = _ask(_client(gw, secret), **{"X-Forwarded-For": "5.9.0.1"})
    region = raw.headers["x-trafficmgr-region"]
    assert region in EU_REGIONS  # a German client never leaves the EU
    assert raw.parse().usage.completion_tokens == 8
    core.maintain()  # reports what completed to the control plane
    stream = hotstate.get().completions(region, None, 10)
    assert [c.output_tokens for _, c in stream] == [8]


def test_operator_and_revoked_tokens_are_not_inference_credentials(
    gateway: tuple[GatewayThread, RequestPath],
) -> None:
    gw, _ = gateway
    _, operator = create_token("ops", "operator")
    with pytest.raises(openai.AuthenticationError):
        _ask(_client(gw, operator))
    token, secret = create_token("gone", "client")
    token.revoked_at = timezone.now()
    token.save()
    with pytest.raises(openai.AuthenticationError):
        _ask(_client(gw, secret))


def test_only_client_tokens_have_a_tenant() -> None:
    with pytest.raises(TokenError) as err:
        create_token("ops", "operator", tenant="acme")
    assert err.value.fields == {"tenant": ["only for role client"]}
