"""``GET /v1/models`` through Envoy: the EPP answers the fleet's models in OpenAI's shape."""

from __future__ import annotations

import openai
import pytest

from tests.epp.conftest import TOKEN, Bench
from tests.epp.http import get

pytestmark = pytest.mark.integration


def test_openai_client_lists_the_fleets_models(bench: Bench) -> None:
    api = openai.OpenAI(base_url=f"{bench.base_url}/v1", api_key=TOKEN, max_retries=0)
    listed = api.models.list()
    assert [m.id for m in listed.data] == ["m1", "m2"]
    assert all(m.object == "model" and m.owned_by == "trafficmgr" for m in listed.data)
    assert api.models.retrieve("m2").id == "m2"
    # answered by the EPP: no endpoint saw the listing, nothing was planned
    assert all(u.served == 0 for u in bench.upstreams)
    assert bench.decision.records == []


def test_listing_is_plain_json_with_a_query_string(bench: Bench) -> None:
    reply = get(f"{bench.base_url}/v1/models?limit=5", {"authorization": f"Bearer {TOKEN}"})
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["object"] == "list"
    assert {m["id"] for m in reply.json()["data"]} == {"m1", "m2"}
