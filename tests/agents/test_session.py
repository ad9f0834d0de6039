"""An agent run is a session: its heartbeats say so, a restart starts another, and a control
plane that does not know the key gets heartbeats without it (older agents keep working the
other way round: the control plane takes heartbeats without a session)."""

from __future__ import annotations

from typing import Any

import pytest

from agents.agent import Agent
from agents.heartbeat import to_json
from agents.push import HEARTBEAT_PATH
from tests.agents.test_push import Stub, heartbeat, pusher


def test_heartbeats_carry_the_session_of_the_agent_run() -> None:
    first, restarted = Agent("euw-1"), Agent("euw-1")
    a, b = to_json(first.collect()), to_json(first.collect())
    assert a["session"] == b["session"] and 16 <= len(a["session"]) <= 64
    assert to_json(restarted.collect())["session"] != a["session"]
    assert set(a["session"]) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )


def test_an_older_control_plane_gets_heartbeats_without_the_session(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    refusal = (400, {"error": "invalid", "fields": {"session": ["unknown field"]}})

    def answer(seen: Any) -> Any:
        return refusal if "session" in seen.json() else (200, {"accepted": True})

    stub.on("POST", HEARTBEAT_PATH, answer)
    p = pusher(stub)
    p.submit({**heartbeat(1), "session": "run-1"})
    p.submit({**heartbeat(2), "session": "run-1"})
    assert p.deliver() == 2 and p.dropped == 0
    posted = [s.json() for s in stub.posts(HEARTBEAT_PATH)]
    assert [d["seq"] for d in posted] == [1, 1, 2]
    assert "session" not in posted[1] and "session" not in posted[2]
