"""A forged heartbeat, posted with the region's agent token, silences no sibling for long.

The probe: ``{"endpoint": "euw-2", "seq": 9007199254740991, "sent_at": now + 290 s}`` made
every genuine heartbeat "stale seq" for about five minutes. Now ``sent_at`` may be at most
``FUTURE_S`` (30 s) ahead, and a stored beat blocks lower seqs for one interval at most.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from regions import hotstate
from regions.loop import heartbeat_doc, ingest
from tests.regions.loop.conftest import API, hb_doc

pytestmark = pytest.mark.django_db
HUGE = 2**53 - 1


def post(client: Any, doc: dict[str, Any]) -> Any:
    return client.post(f"{API}/heartbeats/", json.dumps(doc), content_type="application/json")


def test_sent_at_far_ahead_is_refused(agent_api: Any) -> None:
    now = time.time()
    response = post(agent_api("eu-west"), hb_doc("euw-2", HUGE, now + 290))
    assert response.status_code == 400
    assert "sent_at" in response.json()["fields"]
    assert heartbeat_doc.FUTURE_S <= 30


def test_a_forged_beat_within_the_skew_blocks_the_real_ones_one_interval_at_most(
    agent_tokens: dict[str, Any],
) -> None:
    token = agent_tokens["eu-west"][0]
    t0 = time.time()

    def send(seq: int, at: float, sent_at: float, **extra: Any) -> bool:
        body = json.dumps(hb_doc("euw-2", seq, sent_at, **extra)).encode()
        return ingest.ingest(token, body, at).accepted

    assert send(int(t0 * 1000), t0, t0, session="real-run")
    assert send(HUGE, t0 + 0.1, t0 + 29)  # forged: no session, huge seq, sent_at ahead
    genuine = [t0 + 0.25 * k for k in range(1, 10)]
    accepted = [t for t in genuine if send(int(t * 1000), t, t, session="real-run")]
    assert accepted == genuine, "a genuine heartbeat was refused"
    stored = hotstate.get().heartbeats()["euw-2"]
    assert stored.received_at == genuine[-1]


def test_an_old_agent_without_a_session_recovers_within_one_interval(
    agent_tokens: dict[str, Any],
) -> None:
    token = agent_tokens["eu-west"][0]
    t0 = time.time()

    def send(seq: int, at: float, sent_at: float) -> bool:
        body = json.dumps(hb_doc("euw-2", seq, sent_at)).encode()
        return ingest.ingest(token, body, at).accepted

    assert send(int(t0 * 1000), t0, t0)
    assert send(HUGE, t0 + 0.1, t0 + 29)
    genuine = [t0 + 0.25 * k for k in range(1, 12)]
    refused = [t for t in genuine if not send(int(t * 1000), t, t)]
    assert max(refused, default=t0) - (t0 + 0.1) < 1.0, refused
