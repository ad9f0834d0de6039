"""A heartbeat's seq counts within its agent's session; no beat silences others for long.

Before: one forged heartbeat (seq 2**53 - 1, sent_at 290 s ahead) made every genuine one
"stale seq" for about five minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from regions.hotstate import Order
from trafficmgr.routing.types import Heartbeat

T0 = 1_800_000_000.0
HUGE = 2**53 - 1


def beat(seq: int, received_at: float, sent_at: float | None = None) -> Heartbeat:
    sent = received_at if sent_at is None else sent_at
    return Heartbeat("euw-1", seq, sent, received_at, (), None, None)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        from regions.hotstate import MemoryHotState

        yield MemoryHotState()
    else:
        yield request.getfixturevalue("redis_store")


def put(store: Any, hb: Heartbeat, session: str = "", hold_s: float = 1.0) -> bool:
    return bool(store.put_heartbeat(hb, 100, None, Order(session, hold_s)).accepted)


@pytest.mark.parametrize("session", ["", "agent-run-1"])
def test_a_forged_huge_seq_silences_nobody_for_longer_than_an_interval(
    store: Any, session: str
) -> None:
    def ms(t: float) -> int:  # our agents' seq: their wall clock in milliseconds
        return int(t * 1000)

    assert put(store, beat(ms(T0), T0), session)
    forged_at = T0 + 0.1
    assert put(store, beat(HUGE, forged_at, T0 + 25), session)  # forged, same session
    late = [T0 + 0.25 * k for k in range(1, 12)]  # the agent's own beats after it
    accepted = [t for t in late if put(store, beat(ms(t), t), session)]
    refused = [t for t in late if t not in accepted]
    assert max(refused, default=forged_at) - forged_at < 1.0, refused  # one interval
    assert accepted == late[len(refused) :], "refused again after recovering"


def test_a_forged_beat_of_another_session_silences_nobody(store: Any) -> None:
    assert put(store, beat(1_000, T0), "real")
    assert put(store, beat(HUGE, T0 + 0.1, T0 + 25), "forged")
    assert put(store, beat(1_001, T0 + 0.2), "real")
    assert store.heartbeats()["euw-1"].seq == 1_001


def test_an_agent_restart_is_a_new_session_and_wins_at_once(store: Any) -> None:
    assert put(store, beat(5_000, T0), "run-1")
    assert put(store, beat(1, T0 + 0.1), "run-2")
    assert put(store, beat(2, T0 + 0.2), "run-2")
    assert store.heartbeats()["euw-1"].seq == 2


def test_replays_and_reordering_in_a_session_still_lose(store: Any) -> None:
    assert put(store, beat(5, T0), "run")
    assert not put(store, beat(5, T0 + 0.2), "run")  # replay
    assert not put(store, beat(4, T0 + 0.3), "run")  # out of order
    assert put(store, beat(6, T0 + 0.4), "run")
