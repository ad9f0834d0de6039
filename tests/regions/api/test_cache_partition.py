"""A Redis cache that accepts connections and never answers costs a request a second.

A network partition, or a peer wedged mid-way, looks like this: the TCP handshake succeeds
and no reply ever comes. Without socket timeouts a cache read then waits as long as the
client library lets it (for ever before redis-py 6, 5 s since). The project's cache settings
(``CACHES`` as ``trafficmgr/settings.py`` builds them for a ``REDIS_URL``) give up after
``TRAFFICMGR_CACHE_TIMEOUT_S`` (1 s): what needs the cache answers the JSON 503 with
``Retry-After``, what can do without it (the rate limit fails open) answers as usual.

The cache is pointed at a listener on 127.0.0.1 that accepts and never answers; the hot state
stays in process, so the cache alone is partitioned.
"""

from __future__ import annotations

import runpy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import trafficmgr.settings
from tests.blackhole import Blackhole

pytestmark = pytest.mark.django_db

FAST_S = 3.0  # two cache reads of 1 s at most; redis-py's default would take 5 s each


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()


@pytest.fixture
def partition(
    blackhole: Blackhole, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], None]]:
    """``partition()``: from now on the cache is the project's Redis cache, as settings.py
    builds it, for a Redis at the blackhole."""
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{blackhole.port}/0")
    monkeypatch.delenv("TRAFFICMGR_CACHE_TIMEOUT_S", raising=False)
    built = runpy.run_path(str(Path(trafficmgr.settings.__file__)))
    assert built["CACHES"]["default"]["BACKEND"].endswith("RedisCache")
    before = settings.CACHES
    from regions.api.throttling import cache_away

    def cut() -> None:
        settings.CACHES = built["CACHES"]

    cache_away.succeeded()  # the rate limit's breaker is process-wide: start closed
    yield cut
    settings.CACHES = before  # before the API fixtures' teardown clears the cache
    cache_away.succeeded()


def timed(call: Any) -> tuple[Any, float]:
    start = time.monotonic()
    reply = call()
    return reply, time.monotonic() - start


def test_a_request_that_needs_the_cache_fails_fast_with_a_json_503(
    partition: Callable[[], None], blackhole: Blackhole, operator_client: Any
) -> None:
    from regions.models import Drill

    drill = Drill.objects.create(kind="endpoint-down", target="euw-1", duration_s=30)
    assert operator_client.post("/api/v1/drills/999999/abort").status_code == 404  # warm
    partition()
    # Aborting asks the cache whether the drill's runner is alive.
    reply, took = timed(lambda: operator_client.post(f"/api/v1/drills/{drill.pk}/abort"))
    assert blackhole.accepted, "the cache never connected to the partitioned Redis"
    assert reply.status_code == 503, reply.content
    assert reply["Content-Type"].startswith("application/json")
    assert reply["Retry-After"].isdigit() and int(reply["Retry-After"]) > 0
    doc = reply.json()
    assert doc["error"] == "unavailable" and "Redis" in doc["detail"], doc
    assert took < FAST_S, f"took {took:.1f} s"


def test_a_request_that_can_do_without_the_cache_still_answers(
    partition: Callable[[], None], blackhole: Blackhole, viewer_client: Any
) -> None:
    assert viewer_client.get("/api/v1/regions/").status_code == 200  # warm
    partition()
    reply, took = timed(lambda: viewer_client.get("/api/v1/regions/"))
    assert blackhole.accepted, "the rate limit never asked the cache"
    assert reply.status_code == 200, reply.content
    assert took < FAST_S, f"took {took:.1f} s"


def test_the_rate_limit_asks_a_partitioned_cache_once_per_spell(
    partition: Callable[[], None], blackhole: Blackhole, viewer_client: Any
) -> None:
    assert viewer_client.get("/api/v1/regions/").status_code == 200  # warm
    partition()
    replies = [timed(lambda: viewer_client.get("/api/v1/regions/")) for _ in range(5)]
    assert all(reply.status_code == 200 for reply, _ in replies), replies
    first, rest = replies[0][1], [took for _, took in replies[1:]]
    assert first >= 0.5, f"the first request did not wait for the cache ({first:.2f} s)"
    # Inside the spell the limit fails open at once instead of each request timing out.
    assert max(rest) < 0.5, f"later requests still waited: {[round(t, 2) for t in rest]}"
