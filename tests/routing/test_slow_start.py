"""Slow start: an endpoint back from an outage ramps up instead of swinging between a third and
all of the picks while its heartbeats catch up (``routing.slowstart``)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.routing.conftest import NOW, make_beat
from tests.routing.test_reported_queue import pair
from trafficmgr.routing.decision import build_loads
from trafficmgr.routing.picker import make_picker
from trafficmgr.routing.slowstart import (
    DEFAULT_FLOOR,
    health_since,
    offered,
    ramp,
    serving_since,
)
from trafficmgr.routing.types import ClientLocation, RegionState, Request

SLOW_START_S = 30.0


def share_per_second(seconds: int, per_second: int = 40) -> list[float]:
    """Return the returned endpoint's share of the picks in each second after its return.

    Decisions as ``/route`` makes them: the view rebuilt from heartbeats every 0.5 s (the
    returned endpoint idle in it, its peer busy), ramping endpoints offered by the ramp's draw.
    """
    fleet = pair()
    region = fleet.regions[0]
    picker = make_picker("ai_aware")
    draw = random.Random(7).random
    request = Request("llama", ClientLocation("IE", "EU"), 1800, 256)
    out = []
    for second in range(seconds):
        got: Counter[str] = Counter()
        for half in range(2):
            at = NOW + second + half / 2
            beats = {
                "busy": make_beat("busy", at, server={"requests_running": 300}),
                "calm": make_beat("calm", at, server={"requests_running": 0}),
            }
            loads = build_loads(fleet, region, RegionState.HEALTHY, at, beats)
            share = ramp(at - NOW, SLOW_START_S)
            full = [x for x in loads if x.endpoint.name == "busy"]
            ramping = [(share, x) for x in loads if x.endpoint.name == "calm"]
            for _ in range(per_second // 2):
                pick = picker.pick(request, tuple(offered(full, ramping, draw)), at)
                got[pick.endpoint or ""] += 1
        out.append(got["calm"] / sum(got.values()))
    return out


def test_a_returning_endpoint_ramps_instead_of_taking_everything() -> None:
    shares = share_per_second(30)
    assert max(shares[:3]) <= 0.3, shares[:3]  # without the ramp: ~100 % at once
    assert sum(shares[:10]) < sum(shares[10:20]) < sum(shares[20:30]), shares
    for second, share in enumerate(shares):
        assert share <= ramp(second + 1, SLOW_START_S) + 0.2, (second, shares)


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(-10, 100),
    b=st.floats(-10, 100),
    slow=st.floats(0, 60),
    floor=st.floats(0, 1),
)
def test_the_ramp_only_grows_and_ends_at_one(a: float, b: float, slow: float, floor: float) -> None:
    lo, hi = sorted((a, b))
    assert floor <= ramp(lo, slow, floor) <= ramp(hi, slow, floor) <= 1.0 or slow <= 0
    assert ramp(slow, slow, floor) == 1.0


@given(
    full=st.lists(st.integers(), max_size=4),
    ramping=st.lists(st.tuples(st.floats(0, 1), st.integers()), max_size=4),
    seed=st.integers(0, 1000),
)
def test_slow_start_only_shares_it_never_refuses(
    full: list[int], ramping: list[tuple[float, int]], seed: int
) -> None:
    got = offered(full, ramping, random.Random(seed).random)
    assert got[: len(full)] == full
    assert bool(got) == bool(full or ramping)


def test_the_offered_share_follows_the_ramp() -> None:
    draw = random.Random(3).random
    hits = sum("r" in offered(["f"], [(0.25, "r")], draw) for _ in range(4000))
    assert 0.22 <= hits / 4000 <= 0.28


def test_the_loop_records_when_health_flipped() -> None:
    assert health_since(None, None, True, 5.0) == 5.0  # joined
    assert health_since(False, 1.0, True, 5.0) == 5.0  # came back
    assert health_since(True, 1.0, True, 5.0) == 1.0
    assert health_since(True, None, True, 5.0) is None  # healthy since before any record


def test_a_decision_sees_a_return_before_the_loop_does() -> None:
    assert serving_since(False, 1.0, True, 9.0) == 9.0
    assert serving_since(True, 4.0, True, 9.0) == 4.0
    assert serving_since(None, None, True, 9.0) is None
    assert serving_since(True, 4.0, False, 9.0) is None
    assert ramp(0.0, SLOW_START_S) == DEFAULT_FLOOR
