"""Control characters in a heartbeat's free text are replaced, not refused.

An agent reports what its driver, server and probe said; a NUL in it cannot be stored in
PostgreSQL (``text`` nor ``jsonb``), a lone surrogate cannot be encoded as UTF-8. Refusing the
heartbeat would make a broken driver look like the agent going silent, so ingest replaces
each such character with U+FFFD. Before, they passed through untouched.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.regions.loop.conftest import API, hb_doc

pytestmark = pytest.mark.django_db

DIRTY = "driver said \x00\x1b[2Jcleared\x7f\x85 \x9b and \ud800 end\ttab\nline"
CLEAN = "driver said \ufffd\ufffd[2Jcleared\ufffd\x85 \ufffd and \ufffd end\ttab\nline"


def dirty_doc(endpoint: str, seq: int, at: float) -> dict[str, Any]:
    doc = hb_doc(endpoint, seq, at)
    doc["server"]["error"] = DIRTY
    doc["probe"]["reason"] = DIRTY
    doc["agent"]["errors"] = [DIRTY, "plain"]
    doc["gpus"][0]["errors"] = [DIRTY]
    doc["gpus"][0]["name"] = "H100\x00"
    doc["drill"] = {"kind\x00": DIRTY}
    return doc


def body_of(doc: dict[str, Any]) -> bytes:
    # ensure_ascii: control characters arrive escaped, as agents' JSON encoders send them
    return json.dumps(doc).encode()


def test_every_free_text_field_comes_out_of_parsing_with_its_controls_replaced() -> None:
    from regions.loop.ingest import parse_heartbeat

    doc = parse_heartbeat(body_of(dirty_doc("euw-1", 1, time.time())))
    assert doc["server"]["error"] == CLEAN
    assert doc["probe"]["reason"] == CLEAN
    assert doc["agent"]["errors"] == [CLEAN, "plain"]
    assert doc["gpus"][0]["errors"] == [CLEAN]
    assert doc["gpus"][0]["name"] == "H100\ufffd"
    assert doc["drill"] == {"kind\ufffd": CLEAN}


def test_raw_c1_and_del_bytes_are_replaced_too() -> None:
    from regions.loop.ingest import parse_heartbeat

    doc = hb_doc("euw-1", 1, time.time())
    doc["server"]["error"] = "a\x7fb\x9fc é"
    body = json.dumps(doc, ensure_ascii=False).encode()
    assert b"\x7f" in body and b"\xc2\x9f" in body and b"\\u" not in body
    assert parse_heartbeat(body)["server"]["error"] == "a\ufffdb\ufffdc é"


def test_a_heartbeat_with_controls_is_accepted_and_stored_clean(
    agent_api: Any, fresh_hot_state: Any
) -> None:
    reply = agent_api("eu-west").generic(
        "POST",
        f"{API}/heartbeats/",
        body_of(dirty_doc("euw-1", 7, time.time())),
        content_type="application/json",
    )
    assert reply.status_code == 200, reply.content
    assert reply.json()["accepted"] is True
    stored = fresh_hot_state.heartbeats()["euw-1"]
    assert stored.gpus[0].name == "H100\ufffd"


@pytest.mark.integration
def test_the_cleaned_heartbeat_is_stored_by_postgresql(postgres_db: str, agent_tokens: Any) -> None:
    from django.db import DataError, transaction
    from django.utils import timezone

    from regions.loop import ingest
    from regions.models import Event, HeartbeatSample

    at = time.time()
    raw = dirty_doc("euw-1", 9, at)
    result = ingest.ingest(agent_tokens["eu-west"][0], body_of(raw), at)
    assert result.accepted, result.body
    assert HeartbeatSample.objects.filter(endpoint__name="euw-1").exists()
    doc = ingest.parse_heartbeat(body_of(raw))
    text = {"server": doc["server"]["error"], "agent": doc["agent"]["errors"]}
    Event.objects.create(
        at=timezone.now(), kind="endpoint", message=doc["server"]["error"], data=text
    )
    stored = Event.objects.get(message=CLEAN)
    assert stored.data == text
    # What ingest used to pass on: PostgreSQL refuses it.
    with pytest.raises((DataError, ValueError)), transaction.atomic():
        Event.objects.create(
            at=timezone.now(), kind="endpoint", message=DIRTY, data={"server": DIRTY}
        )
