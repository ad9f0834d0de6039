"""POST /api/v1/route weighs what endpoints report, ramps returning ones, honours weight 0.

``/route`` has no in-flight view of its own: heartbeats are all it knows. The loop world's
eu-west has two endpoints serving llama-3-8b, ``euw-1`` (8 x H100, the faster) and ``euw-2``
(4 x A100); each test makes the faster one the one that must lose its share, and keeps
eu-central silent (down), so that the Irish clients' decisions all land in eu-west.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from tests.regions.decisions.test_route import route
from tests.regions.loop.conftest import ENDPOINTS

pytestmark = pytest.mark.django_db
OTHERS = tuple(e for e in ENDPOINTS if e not in ("euw-1", "euc-1"))


def eu_west_picks(client: Any, n: int) -> Counter[str]:
    """Route ``n`` Irish requests for llama-3-8b; count the endpoints eu-west answers with."""
    got: Counter[str] = Counter()
    for _ in range(n):
        response = route(client, model="llama-3-8b", client_country="IE")
        assert response.status_code == 200, response.content
        body = response.json()
        if body["region"] == "eu-west":
            got[body["endpoint"]] += 1
    assert sum(got.values()) == n, got
    return got


def test_a_long_queue_and_a_full_cache_get_a_small_share(viewer_client: Any, feed: Any) -> None:
    from regions.loop.control import run_tick

    now = time.time()
    feed(now - 10, ["euc-1"])
    feed(now, OTHERS, running=4 * 48, waiting=0, kv=0.9)
    feed(now, ["euw-1"], running=8 * 64, waiting=5000, kv=0.99)
    assert run_tick(now).ran
    got = eu_west_picks(viewer_client, 120)
    assert got["euw-1"] / sum(got.values()) <= 0.1, got


def test_an_endpoint_back_from_an_outage_ramps(
    viewer_client: Any, feed: Any, fresh_hot_state: Any
) -> None:
    from regions.loop.control import run_tick

    start = time.time()
    feed(start - 10, ["euw-1", "euc-1"])  # silent for 10 s: down
    feed(start, OTHERS, running=100)
    assert run_tick(start).ran
    assert not fresh_hot_state.evaluation()["endpoints"]["euw-1"]["healthy"]
    back = time.time()
    feed(back, OTHERS, running=100)
    feed(back, ["euw-1"], running=0)  # back, idle: the cheapest by far
    assert run_tick(back).ran
    record = fresh_hot_state.evaluation()["endpoints"]["euw-1"]
    assert record["healthy"] and record["since"] == pytest.approx(back)
    got = eu_west_picks(viewer_client, 200)
    # the fleet's slow start is 30 s, from 10 %: seconds after the return it is far from all
    assert got["euw-1"] / sum(got.values()) <= 0.3, got


def test_an_endpoint_of_weight_zero_gets_no_picks(viewer_client: Any, feed: Any) -> None:
    from regions.fleet import snapshot
    from regions.loop.control import run_tick
    from regions.models import Endpoint

    Endpoint.objects.filter(name="euw-1").update(weight=0.0)
    snapshot.forget()
    now = time.time()
    feed(now - 10, ["euc-1"])
    feed(now, OTHERS, running=100)
    feed(now, ["euw-1"], running=0)  # idle and faster, yet weighted out
    assert run_tick(now).ran
    got = eu_west_picks(viewer_client, 80)
    assert got["euw-1"] == 0, got
