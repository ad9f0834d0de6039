"""A silenced agent's drill poll: its pending instruction, once, and no heartbeat recorded."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.regions.loop.conftest import API, hb_doc

pytestmark = pytest.mark.django_db


def poll(client: Any, endpoint: str) -> Any:
    return client.get(f"{API}/heartbeats/{endpoint}/drill")


def test_the_pending_instruction_is_handed_over_once_without_a_heartbeat(
    agent_api: Any, fresh_hot_state: Any
) -> None:
    client = agent_api("eu-west")
    assert (
        client.post(
            f"{API}/heartbeats/", hb_doc("euw-1", 7, time.time()), format="json"
        ).status_code
        == 200
    )
    before = fresh_hot_state.heartbeats()
    response = poll(client, "euw-1")
    assert response.status_code == 200 and response.json() == {"drill": None}
    cancel = {"kind": "none", "id": "drill-3-end"}
    fresh_hot_state.set_drill("euw-1", cancel, 30.0)
    assert poll(client, "euw-1").json() == {"drill": cancel}
    again = client.get(f"{API}/heartbeats/euw-1/drill/")  # a trailing slash is fine too
    assert again.json() == {"drill": None}  # handed over once
    assert fresh_hot_state.heartbeats() == before  # the poll is not a heartbeat


def test_only_the_endpoints_own_agent_may_poll(
    agent_api: Any, fresh_hot_state: Any, client: Any
) -> None:
    fresh_hot_state.set_drill("euw-1", {"kind": "none"}, 30.0)
    assert poll(agent_api("eu-central"), "euw-1").status_code == 403
    assert poll(client, "euw-1").status_code == 401
    unknown = poll(agent_api("eu-west"), "no-such-endpoint")  # as a heartbeat naming it
    assert unknown.status_code == 400 and "endpoint" in unknown.json()["fields"]
    assert poll(agent_api("eu-west"), "euw-1").json() == {"drill": {"kind": "none"}}
