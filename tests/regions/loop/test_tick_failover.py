"""Ticks driven with an explicit ``now``: silence takes a region out, slow start brings it back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.regions.loop.conftest import ENDPOINTS

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0
EU_WEST = ("euw-1", "euw-2")
OTHERS = tuple(e for e in ENDPOINTS if e not in EU_WEST)


def tick(at: float) -> Any:
    from regions.loop.control import run_tick

    result = run_tick(at, interval_s=1.0)
    assert result.ran
    return result


def state(store: Any, region: str) -> str:
    return str(store.table().regions[region].state.value)


def gb_weights(store: Any) -> dict[str, float]:
    from trafficmgr.routing.geo import country_location
    from trafficmgr.routing.table import lookup

    return {
        w.region: w.weight for w in lookup(store.table(), country_location("GB"), "llama-3-70b")
    }


def test_first_tick_publishes_a_healthy_table(feed: Any, fresh_hot_state: Any) -> None:
    from regions.models import RoutingTableVersion

    feed(T0)
    result = tick(T0)
    assert result.changed and result.recorded
    assert {r: s.state.value for r, s in fresh_hot_state.table().regions.items()} == {
        "eu-west": "healthy",
        "eu-central": "healthy",
        "us-east": "healthy",
        "ap-south": "healthy",
    }
    row = RoutingTableVersion.objects.get()
    assert row.version == result.version == fresh_hot_state.table_version()
    assert set(gb_weights(fresh_hot_state)) <= {"eu-west", "eu-central"}


def test_an_unchanged_tick_publishes_nothing(feed: Any, fresh_hot_state: Any) -> None:
    from regions.models import RoutingTableVersion

    feed(T0)
    first = tick(T0)
    feed(T0 + 1)
    second = tick(T0 + 1)
    assert second.version == first.version and not second.changed
    assert RoutingTableVersion.objects.count() == 1


def test_silence_takes_a_region_down_after_the_miss_threshold(
    feed: Any, fresh_hot_state: Any
) -> None:
    from regions.models import Event

    feed(T0)
    tick(T0)
    for k in (1, 2, 3):  # eu-west silent; never out on a missed heartbeat or two or three
        feed(T0 + k, OTHERS)
        tick(T0 + k)
        assert state(fresh_hot_state, "eu-west") == "healthy", k
    feed(T0 + 4, OTHERS)
    result = tick(T0 + 4)  # 4 s > miss_threshold 3 x interval 1 s
    assert state(fresh_hot_state, "eu-west") == "down"
    assert [(t.region, t.old.value, t.new.value) for t in result.transitions] == [
        ("eu-west", "healthy", "down")
    ]
    assert "eu-west" not in gb_weights(fresh_hot_state)
    assert sum(gb_weights(fresh_hot_state).values()) == pytest.approx(1.0)
    event = Event.objects.get(region="eu-west", kind="failover")
    assert event.severity == "error" and "healthy → down" in event.message


def test_a_recovered_region_ramps_back_through_slow_start(feed: Any, fresh_hot_state: Any) -> None:
    feed(T0)
    tick(T0)
    full = gb_weights(fresh_hot_state)["eu-west"]
    for k in range(1, 5):
        feed(T0 + k, OTHERS)
        tick(T0 + k)
    assert state(fresh_hot_state, "eu-west") == "down"
    seen = []
    for k in range(5, 50):
        feed(T0 + k)
        tick(T0 + k)
        seen.append(
            (k, state(fresh_hot_state, "eu-west"), gb_weights(fresh_hot_state).get("eu-west", 0.0))
        )
    states = [s for _, s, _ in seen]
    first = states.index("recovering")
    assert seen[first][0] >= 4 + 5  # hold-down 5 s after going down
    ramping = [w for _, s, w in seen if s == "recovering"]
    assert 0 < ramping[0] < full / 2, "slow start begins small"
    assert ramping == sorted(ramping), "and only grows"
    assert states[-1] == "healthy"
    healthy_at = next(k for k, s, _ in seen[first:] if s == "healthy")
    assert healthy_at - seen[first][0] >= 30  # slow_start_s
    assert seen[-1][2] == pytest.approx(full, abs=1e-3)


def test_pause_failover_keeps_a_silent_region_up(feed: Any, fresh_hot_state: Any) -> None:
    from regions.models import Region

    feed(T0)
    tick(T0)
    Region.objects.filter(name="eu-west").update(failover_paused=True)
    from regions.fleet import snapshot

    snapshot.forget()
    for k in range(1, 8):
        feed(T0 + k, OTHERS)
        tick(T0 + k)
    assert state(fresh_hot_state, "eu-west") == "healthy"
    assert fresh_hot_state.machines()["eu-west"].paused


def test_the_dashboard_group_gets_each_new_table(feed: Any) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("dashboard", channel)
    try:
        feed(T0)
        result = tick(T0)
        message = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)("dashboard", channel)
    assert message["type"] == "table.update"
    assert message["version"] == result.version == message["table"]["version"]
    assert message["table"]["regions"]["eu-west"]["state"] == "healthy"
    assert message["diff"]["new_version"] == result.version


def test_endpoint_health_flips_are_events(feed: Any) -> None:
    from regions.models import Event

    feed(T0)
    tick(T0)
    feed(T0 + 1, ["euw-2"], probe_ok=False)
    feed(T0 + 1, [e for e in ENDPOINTS if e != "euw-2"])
    tick(T0 + 1)
    event = Event.objects.get(endpoint="euw-2")
    assert event.kind == "health" and "probe failed" in event.message


def test_a_config_change_reaches_the_next_tick(feed: Any, fresh_hot_state: Any) -> None:
    from regions.models import Region

    feed(T0)
    tick(T0)
    region = Region.objects.get(name="eu-central")
    region.weight = 0.0
    region.save()  # signals bump the config version: no stale fleet
    feed(T0 + 1)
    tick(T0 + 1)
    assert "eu-central" not in gb_weights(fresh_hot_state)
