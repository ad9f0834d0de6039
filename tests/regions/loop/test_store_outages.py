"""Either store failing loses no event and takes no healthy region down.

- the control plane's own impairment (heartbeats it refused, a Redis that lost its data) is
  not read as the fleet failing: the loop holds its last decision;
- a tick's events reach PostgreSQL before its state reaches Redis; with the database away
  they wait in Redis's outbox and are stored once it is back, once;
- a Redis that lost its data gets the machines and the counters back from the database.

Before: the tick saved the machines to Redis and then failed writing the events (lost), and a
Redis restart lost the machines (every region started over from ``unknown``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError

from trafficmgr.testing.topology.consistency import changes, missing_events

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0
US = ("use-1",)
NOT_US = ("euw-1", "euw-2", "euc-1", "aps-1")


def tick(at: float) -> Any:
    from regions.loop.control import run_tick

    result = run_tick(at, interval_s=1.0)
    assert result.ran
    return result


def states(store: Any) -> dict[str, str]:
    return {r: s.state.value for r, s in store.table().regions.items()}


def transition_events() -> list[dict[str, str]]:
    from regions.models import Event

    return [
        {"region": e.region, "old": e.data["old"], "new": e.data["new"]}
        for e in Event.objects.filter(endpoint="").order_by("at", "id")
        if "old" in e.data
    ]


def test_silence_caused_by_the_control_plane_takes_no_region_down(
    feed: Any, fresh_hot_state: Any
) -> None:
    feed(T0)
    tick(T0)
    assert set(states(fresh_hot_state).values()) == {"healthy"}
    version = fresh_hot_state.table_version()
    # The web processes could not take heartbeats from T0 + 1 to T0 + 20 (store away).
    fresh_hot_state.add_impairment("web-1", (T0 + 1, T0 + 20))
    for k in range(2, 21):
        result = tick(T0 + k)
        assert result.held
        assert set(states(fresh_hot_state).values()) == {"healthy"}
    assert fresh_hot_state.table_version() == version, "the held table changed"
    for k in range(21, 25):  # the agents are back; the hold lasts a grace past the spell
        feed(T0 + k)
        assert tick(T0 + k).held
    for k in range(25, 30):
        feed(T0 + k)
        assert not tick(T0 + k).held
        assert set(states(fresh_hot_state).values()) == {"healthy"}
    later = [e for e in transition_events() if e["old"] != "unknown"]
    assert later == [], "a region changed state"


def test_silence_of_the_agents_themselves_still_takes_regions_down(
    feed: Any, fresh_hot_state: Any
) -> None:
    feed(T0)
    tick(T0)
    for k in range(1, 8):
        feed(T0 + k, NOT_US)
        tick(T0 + k)
    assert states(fresh_hot_state)["us-east"] == "down"


def test_events_wait_in_redis_while_the_database_is_away(
    feed: Any, fresh_hot_state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regions.loop import durable
    from regions.models import Event

    feed(T0)
    tick(T0)
    seen = [states(fresh_hot_state)]
    before = Event.objects.count()
    original = durable._save_state

    def away(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(durable, "_save_state", away)
    for k in range(1, 8):  # us-east falls silent while the database is away
        feed(T0 + k, NOT_US)
        tick(T0 + k)
        seen.append(states(fresh_hot_state))
    assert seen[-1]["us-east"] == "down"
    assert Event.objects.count() == before
    assert fresh_hot_state.outbox(100), "the events of the outage were not kept"
    monkeypatch.setattr(durable, "_save_state", original)
    durable.database.succeeded()  # the breaker's 2 s are real time; these ticks are not
    feed(T0 + 8)
    tick(T0 + 8)
    seen.append(states(fresh_hot_state))
    assert fresh_hot_state.outbox(100) == []
    assert missing_events(seen, transition_events()) == []
    feed(T0 + 9)
    tick(T0 + 9)  # draining again stores nothing twice
    seen.append(states(fresh_hot_state))
    later = [e for e in transition_events() if e["old"] != "unknown"]
    assert len(later) == len(changes(seen)), (later, changes(seen))


def test_a_redis_that_lost_its_data_gets_the_machines_and_counters_back(
    feed: Any, fresh_hot_state: Any
) -> None:
    from regions import hotstate
    from regions.hotstate import MemoryHotState

    feed(T0)
    tick(T0)
    for k in range(1, 8):
        feed(T0 + k, NOT_US)
        tick(T0 + k)
    assert states(fresh_hot_state)["us-east"] == "down"
    ran = fresh_hot_state.counters()["ticks|result=ran"]
    for k in range(8, 14):  # the ticks between two copies of the counters
        feed(T0 + k, NOT_US)
        tick(T0 + k)
    events = len(transition_events())
    restarted = MemoryHotState()  # Redis restarted without its data
    restarted._epoch = ""
    hotstate.use(restarted)
    feed(T0 + 14, NOT_US)
    result = tick(T0 + 14)
    assert result.held, "the data Redis lost is silence the agents did not cause"
    assert restarted.table() is not None, "the last table was not published again"
    assert states(restarted)["us-east"] == "down"
    for k in range(15, 25):
        feed(T0 + k, NOT_US)
        tick(T0 + k)
    table = states(restarted)
    assert table["us-east"] == "down" and table["eu-west"] == "healthy", table
    assert len(transition_events()) == events, "regions went through states again"
    assert restarted.counters()["ticks|result=ran"] >= ran
