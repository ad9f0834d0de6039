"""Heartbeats arriving together reach the hot state in one round trip, each with its own answer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.regions.loop.asgi_calls import Recorder, call, call_together
from tests.regions.loop.conftest import API, hb_doc

HEARTBEATS = f"{API}/heartbeats/"


@pytest.fixture
def front() -> Iterator[Any]:
    from django.core.handlers.asgi import ASGIHandler

    from regions.api.fastfront.front import LoopFront

    app = LoopFront(Recorder(ASGIHandler()), enabled=True)
    yield app
    app.close()


@pytest.mark.django_db(transaction=True)
def test_heartbeats_of_one_turn_share_a_write(
    front: Any, agent_tokens: dict[str, Any], fresh_hot_state: Any, monkeypatch: Any
) -> None:
    batches: list[int] = []
    put_heartbeats = fresh_hot_state.put_heartbeats

    def recording(items: Any) -> Any:
        batches.append(len(items))
        return put_heartbeats(items)

    monkeypatch.setattr(fresh_hot_state, "put_heartbeats", recording)
    headers = {"authorization": f"Bearer {agent_tokens['eu-west'][1]}"}
    now = time.time()

    def body(endpoint: str, seq: int) -> bytes:
        return json.dumps(hb_doc(endpoint, seq, now)).encode()

    assert call(front, HEARTBEATS, body("euw-1", 1), headers).status == 200  # warm the caches
    replies = call_together(
        front,
        [
            (HEARTBEATS, body("euw-1", 2), headers),
            (HEARTBEATS, body("euw-2", 2), headers),
            (HEARTBEATS, body("euw-1", 2), headers),  # the same beat again: stale
        ],
    )
    assert batches == [1, 3]
    assert [r.json()["accepted"] for r in replies] == [True, True, False]
    assert replies[2].json() == {"accepted": False, "reason": "stale seq"}
    assert fresh_hot_state.heartbeats()["euw-1"].seq == 2


@pytest.mark.integration
def test_a_pipeline_of_puts_in_redis(redis_store: Any) -> None:
    from dataclasses import replace

    from regions.loop import ingest
    from regions.loop.heartbeat_doc import to_heartbeat
    from tests.regions.loop.conftest import hb_doc as doc_of

    now = time.time()
    hb, totals = to_heartbeat(
        ingest.parse_heartbeat(json.dumps(doc_of("euw-1", 5, now)).encode()), now, {}
    )
    redis_store.set_drill("euw-2", {"kind": "silence"}, 60)
    items = [
        (hb, 10, totals),
        (replace(hb, endpoint="euw-2"), 10, totals),
        (hb, 10, totals),
    ]
    results = redis_store.put_heartbeats(items)
    assert [(r.accepted, r.new_bucket) for r in results] == [
        (True, True),
        (True, True),
        (False, False),
    ]
    assert results[1].drill == {"kind": "silence"} and results[0].drill is None
    redis_store.redis.script_flush()  # Redis restarted: the script must be loaded again
    later = [(replace(hb, seq=6), 10, totals), (replace(hb, endpoint="euw-3", seq=1), 20, totals)]
    assert [(r.accepted, r.new_bucket) for r in redis_store.put_heartbeats(later)] == [
        (True, False),
        (True, True),
    ]
    assert redis_store.heartbeats(["euw-1"])["euw-1"].seq == 6
