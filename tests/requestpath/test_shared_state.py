"""The shared request-path state against a real Redis: two cores decide as one.

Each test uses its own key prefix, so tests never see each other's processes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.gateway.world import US_IP
from tests.requestpath.conftest import ask, plan
from trafficmgr.contracts import (
    SHARED_BLOCKS_KEY,
    SHARED_PROCS_KEY,
    SharedProcess,
    encode_shared_process,
    redis_key,
    shared_process_key,
)
from trafficmgr.requestpath import Outcome, RequestPath, Usage
from trafficmgr.requestpath.shared.config import SharingConfig
from trafficmgr.requestpath.shared.store import SharedState

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"test-shared-{secrets.token_hex(4)}"
    yield name
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


@pytest.fixture
def share(redis_url: str, prefix: str) -> Callable[..., SharedState]:
    def make(core: RequestPath, pid: str, **config: Any) -> SharedState:
        return SharedState(core, SharingConfig(redis_url, prefix=prefix, **config), pid=pid)

    return make


def test_requests_in_flight_on_one_process_steer_the_other(
    make_core: Callable, share: Callable[..., SharedState]
) -> None:
    a, _ = make_core(default_strategy="least_connections")
    b, _ = make_core(default_strategy="least_connections")
    sa, sb = share(a, "a"), share(b, "b")
    held = [plan(a.decide(ask(client_ip=US_IP))) for _ in range(6)]
    busy = {p.targets[0].name for p in held}
    assert len(busy) == 2  # us-east's two endpoints, three each
    sa.sync()
    sb.sync()
    assert sum(b._gate.running(n) for n in busy) == 6
    assert sb.peers == 1
    # B's own ledger is empty; it sees A's six and counts them with its own
    picks = [plan(b.decide(ask(client_ip=US_IP))) for _ in range(4)]
    counts = {n: a.ledger.running(n) + b.ledger.running(n) for n in busy}
    assert max(counts.values()) - min(counts.values()) <= 1
    for p in held + picks:
        (a if p in held else b).finished(p.handle, Usage(2, 3), Outcome.OK)
    sa.sync()
    sb.sync()
    assert a.ledger.total == b.ledger.total == 0
    assert b._gate.peers == {} and a._gate.peers == {}  # the totals reconcile to zero


def test_a_conversation_lands_where_its_prefix_is_whichever_process_gets_it(
    make_core: Callable, share: Callable[..., SharedState]
) -> None:
    a, _ = make_core(default_strategy="ai_aware")
    b, _ = make_core(default_strategy="ai_aware")
    sa, sb = share(a, "a"), share(b, "b")
    same = 0
    for turn in range(6):
        prompt = f"conversation {turn} " + "shared system prompt and history " * 200
        first = plan(a.decide(ask(client_ip=US_IP, prompt=prompt)))
        a.finished(first.handle, Usage(2, 3), Outcome.OK)
        sa.sync()
        sb.sync()
        second = plan(b.decide(ask(client_ip=US_IP, prompt=prompt + " next turn")))
        b.finished(second.handle, Usage(2, 3), Outcome.OK)
        same += first.targets[0].name == second.targets[0].name
    assert same == 6


def test_a_dead_process_work_expires_with_its_lease(
    make_core: Callable, share: Callable[..., SharedState]
) -> None:
    a, _ = make_core(default_strategy="least_connections")
    b, _ = make_core(default_strategy="least_connections")
    sa, sb = share(a, "a", lease_s=0.3), share(b, "b")
    for _ in range(4):
        plan(a.decide(ask(client_ip=US_IP)))
    sa.sync()  # then A dies: no more publishing, no withdrawal
    sb.sync()
    assert sum(b._gate.peers[n][0] for n in b._gate.peers) == 4
    time.sleep(0.5)
    sb.sync()
    assert b._gate.peers == {}
    assert sb.ignored.get("lease_expired") == 1


def test_a_silent_process_stops_counting_after_the_staleness_bound(
    make_core: Callable, share: Callable[..., SharedState]
) -> None:
    a, _ = make_core(default_strategy="least_connections")
    b, _ = make_core(default_strategy="least_connections")
    sa, sb = share(a, "a", lease_s=30.0), share(b, "b", max_staleness_s=0.2)
    plan(a.decide(ask(client_ip=US_IP)))
    sa.sync()
    time.sleep(0.3)
    sb.sync()
    assert b._gate.peers == {}
    assert sb.ignored.get("stale") == 1


def test_corrupt_and_foreign_values_are_ignored_and_counted(
    make_core: Callable, share: Callable[..., SharedState], redis_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    procs = redis_key(SHARED_PROCS_KEY, prefix)
    client.sadd(procs, "junk", "future", "liar")
    client.set(redis_key(shared_process_key("junk"), prefix), b"\xff not json")
    future = SharedProcess(99, "future", time.time(), {"use-1": (5, 1.0, 1.0)})
    client.set(redis_key(shared_process_key("future"), prefix), encode_shared_process(future))
    liar = SharedProcess(1, "someone-else", time.time(), {"use-1": (5, 1.0, 1.0)})
    client.set(redis_key(shared_process_key("liar"), prefix), encode_shared_process(liar))
    stream = redis_key(SHARED_BLOCKS_KEY, prefix)
    client.xadd(stream, {"p": "x", "b": "not json"})
    client.xadd(stream, {"nothing": "here"})
    b, _ = make_core()
    sb = share(b, "b")
    assert sb.sync()
    assert b._gate.peers == {}
    assert sb.ignored == {"corrupt": 2, "foreign": 3}
    assert plan(b.decide(ask(client_ip=US_IP)))


def test_without_redis_decisions_continue_from_the_local_view_and_are_counted(
    make_core: Callable,
) -> None:
    core, _ = make_core()
    unreachable = SharingConfig("redis://127.0.0.1:1/0", timeout_s=0.2)
    shared = SharedState(core, unreachable, pid="alone")
    assert not shared.sync()
    for _ in range(3):
        got = plan(core.decide(ask(client_ip=US_IP)))
        core.finished(got.handle, None, Outcome.OK)
    status = shared.status()
    assert status["mode"] == "local" and not status["connected"]
    assert status["local_decisions"] == 3
    assert sum(status["errors"].values()) == 1


def test_an_ejection_on_one_process_is_respected_by_the_other(
    make_core: Callable, share: Callable[..., SharedState]
) -> None:
    a, _ = make_core(consecutive_failures=1)
    b, _ = make_core()
    sa, sb = share(a, "a"), share(b, "b")
    got = plan(a.decide(ask(client_ip=US_IP)))
    bad = got.targets[0].name
    a.served(got.handle, bad)
    a.finished(got.handle, None, Outcome.CONNECT_ERROR)
    assert bad in a.outlier.ejected_names()
    sa.sync()
    sb.sync()
    assert b.outlier.ejected(bad, b._clock())
    picks = {plan(b.decide(ask(client_ip=US_IP))).targets[0].name for _ in range(10)}
    assert bad not in picks


def test_a_slow_start_begun_on_one_process_ramps_on_the_other(
    make_core: Callable, share: Callable[..., SharedState]
) -> None:
    a, _ = make_core(slow_start_s=30.0)
    b, _ = make_core(slow_start_s=30.0)
    sa, sb = share(a, "a"), share(b, "b")
    a.drain("use-1")
    a.undrain("use-1")  # back: A ramps it from now
    assert a.outlier.ramp("use-1", a._clock(), 30.0, 0.1) < 1.0
    assert b.outlier.ramp("use-1", b._clock(), 30.0, 0.1) == 1.0
    sa.sync()
    sb.sync()
    assert b.outlier.ramp("use-1", b._clock(), 30.0, 0.1) < 0.2


def test_parts_from_a_clock_far_ahead_are_ignored(
    make_core: Callable, share: Callable[..., SharedState], redis_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.sadd(redis_key(SHARED_PROCS_KEY, prefix), "ahead")
    ahead = SharedProcess(1, "ahead", time.time() + 60, {"use-1": (5, 1.0, 1.0)})
    client.set(redis_key(shared_process_key("ahead"), prefix), encode_shared_process(ahead))
    b, _ = make_core()
    sb = share(b, "b")
    assert sb.sync()
    assert b._gate.peers == {} and sb.ignored == {"clock_skew": 1}


def test_when_redis_answers_again_the_process_shares_again(
    make_core: Callable, redis_url: str, prefix: str
) -> None:
    core, _ = make_core()
    shared = SharedState(core, SharingConfig("redis://127.0.0.1:1/0", prefix=prefix), pid="p")
    assert not shared.sync() and shared.status()["mode"] == "local"
    shared.client = redis.Redis.from_url(redis_url)  # Redis is back (here: reachable)
    assert shared.sync()
    assert shared.status()["mode"] == "shared" and shared.status()["connected"]
