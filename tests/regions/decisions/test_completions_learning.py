"""Reported completions reach every web process's pickers, each entry once, and show in /route.

Two processes are two ``/route`` cores (``decisions._router``: the shared request-path core
and its learner) over one hot state: the in-process store, or with ``REDIS_URL`` two Redis
clients on one prefix.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.regions.loop.conftest import API, US_IP

pytestmark = pytest.mark.django_db
MODEL = "llama-3-8b"


class Process:
    """One web process: its own ``/route`` core and its own hot-state client."""

    def __init__(self, store: Any) -> None:
        from regions.decisions import route as decisions

        self.store = store
        self.router = decisions._Router()

    @contextmanager
    def running(self, monkeypatch: Any) -> Iterator[None]:
        from regions import hotstate
        from regions.decisions import route as decisions

        with monkeypatch.context() as m:
            m.setattr(decisions, "_router", self.router)
            hotstate.use(self.store)
            try:
                yield
            finally:
                hotstate.use(None)

    def learned(self, model: str = MODEL) -> int:
        """Read the control plane again (as a decision would); return the observations."""
        self.router.core.maintain()
        return int(self.router.core.learner.estimator.count(model))


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def processes(
    request: pytest.FixtureRequest, loop_world: Any, monkeypatch: Any
) -> Iterator[tuple[Process, Process]]:
    """Two processes sharing one hot state; candidates rebuilt on every look."""
    from regions.decisions import route as decisions

    monkeypatch.setattr(decisions, "LOADS_TTL_S", 0.0)
    decisions.forget()
    if request.param == "memory":
        from regions.hotstate import MemoryHotState

        store = MemoryHotState()
        yield Process(store), Process(store)
        return
    from regions.hotstate.redis_store import RedisHotState

    url = request.getfixturevalue("redis_url")
    prefix = f"trafficmgr-test-{uuid.uuid4().hex[:10]}"
    first, second = RedisHotState(url, prefix=prefix), RedisHotState(url, prefix=prefix)
    yield Process(first), Process(second)
    first.reset()


def report(client: Any, n: int, **changes: Any) -> None:
    doc = {
        "endpoint": "euw-1",
        "model": MODEL,
        "input_tokens": 1000,
        "output_tokens": 300,
        "latency_ms": 1500.0,
        **changes,
    }
    body = json.dumps({"completions": [doc] * n}).encode()
    response = client.generic("POST", f"{API}/route/completions", body, "application/json")
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": n}


def test_a_completion_reported_to_one_process_is_learned_by_another(
    processes: tuple[Process, Process], viewer_client: Any, monkeypatch: Any
) -> None:
    a, b = processes
    with a.running(monkeypatch):
        assert a.learned() == 0
        report(viewer_client, 30)
    with b.running(monkeypatch):
        assert b.learned() == 30  # its first look replays what was reported lately
        assert b.learned() == 30  # ... once
    with a.running(monkeypatch):
        assert a.learned() == 30
        assert a.learned() == 30
    with b.running(monkeypatch):
        report(viewer_client, 5)
        assert b.learned() == 35
    with a.running(monkeypatch):
        assert a.learned() == 35
        # every region's stream is read, into the process's one estimator
        assert a.learned() == 35


def test_a_first_look_replays_a_bounded_tail_then_reads_in_bounded_steps(
    processes: tuple[Process, Process], viewer_client: Any, monkeypatch: Any
) -> None:
    from trafficmgr.requestpath import learning

    monkeypatch.setattr(learning, "STREAM_REPLAY", 10)
    monkeypatch.setattr(learning, "STREAM_PER_READ", 4)
    a, b = processes
    with a.running(monkeypatch):
        report(viewer_client, 25)
    with b.running(monkeypatch):
        assert b.learned() == 10  # the latest 10 of 25
        report(viewer_client, 9)
        assert [b.learned() for _ in range(4)] == [14, 18, 19, 19]


def test_a_new_fleet_view_keeps_what_the_picker_learned(
    processes: tuple[Process, Process], viewer_client: Any, monkeypatch: Any
) -> None:
    from regions.fleet import snapshot

    a, _ = processes
    with a.running(monkeypatch):
        report(viewer_client, 7)
        assert a.learned() == 7
        learner = a.router.core.learner
        snapshot.forget()  # the next look reads a new fleet view
        assert a.learned() == 7
        assert a.router.core.learner is learner


def test_overlapping_reads_feed_each_entry_once(loop_world: Any, fresh_hot_state: Any) -> None:
    from regions.decisions import completions
    from regions.decisions import route as decisions
    from regions.fleet import snapshot

    body = json.dumps(
        {
            "completions": [
                {
                    "endpoint": "use-1",
                    "model": MODEL,
                    "input_tokens": 10,
                    "output_tokens": i,
                    "latency_ms": 5.0,
                }
                for i in range(20)
            ]
        }
    )
    completions.report(body.encode())
    entries = fresh_hot_state.completions("us-east", None, 100)
    core = decisions._current().fresh(snapshot.current())
    learner = core.learner
    assert learner.estimator.count(MODEL) == 20
    # two reads of the stream that both happened before either was fed
    learner.learn_stream("us-east", entries[:15])
    learner.learn_stream("us-east", entries[5:])
    assert learner.estimator.count(MODEL) == 20
    assert learner.stream_after("us-east")[0] == entries[-1][0]


def test_a_failed_read_skips_learning_not_the_decision(
    live: float, viewer_client: Any, fresh_hot_state: Any, monkeypatch: Any
) -> None:
    from regions.decisions import route as decisions

    def broken(*args: Any) -> Any:
        raise ConnectionError("redis went away")

    monkeypatch.setattr(fresh_hot_state, "completions", broken)
    assert route(viewer_client).status_code == 200
    assert decisions.core().learner.stream_after("us-east")[0] is None  # replayed next time


@pytest.fixture
def live(feed: Any, monkeypatch: Any) -> float:
    """Every endpoint reported just now and a tick published the table."""
    from regions.decisions import route as decisions
    from regions.loop.control import run_tick

    monkeypatch.setattr(decisions, "LOADS_TTL_S", 0.0)
    decisions.forget()
    now = time.time()
    feed(now)
    assert run_tick(now).ran
    return now


def route(client: Any, **changes: Any) -> Any:
    doc = {
        "model": "llama-3-70b",
        "client_ip": US_IP,
        "input_tokens": 2000,
        "max_output_tokens": 8000,
        **changes,
    }
    body = json.dumps(doc).encode()
    return client.generic("POST", f"{API}/route", body, content_type="application/json")


def expected_output(response: Any) -> int:
    assert response.status_code == 200, response.content
    reason = response.json()["reason"]
    assert response.json()["region"] == "us-east", reason
    match = re.search(r"~(\d+) output tokens", reason)
    assert match is not None, reason
    return int(match.group(1))


def test_route_shows_the_output_length_learned_for_a_prefix(
    live: float, viewer_client: Any
) -> None:
    before = expected_output(route(viewer_client, prefix_hashes=[4242, 7]))
    assert before < 200  # the estimator's prior
    long = {"endpoint": "use-1", "model": "llama-3-70b", "input_tokens": 2000}
    report(viewer_client, 6, **long, output_tokens=3000, prefix_hashes=[4242, 99])
    report(viewer_client, 40, **long, output_tokens=100, prefix_hashes=[1717])
    assert expected_output(route(viewer_client, prefix_hashes=[4242, 7])) == 3000
    assert expected_output(route(viewer_client, prefix_hashes=[1717])) == 100
    unseen = expected_output(route(viewer_client, prefix_hashes=[5555]))
    assert 100 < unseen < 3000  # no history for this prefix: the model's mean
    capped = route(viewer_client, prefix_hashes=[4242], max_output_tokens=500)
    assert expected_output(capped) == 500


def test_the_picker_is_told_each_completion_with_its_latency_in_seconds(
    processes: tuple[Process, Process], viewer_client: Any, monkeypatch: Any
) -> None:
    a, _ = processes
    with a.running(monkeypatch):
        a.learned()
        calls: list[tuple[Any, ...]] = []
        picker = a.router.core.learner._teacher  # what every picker of the process learns from
        monkeypatch.setattr(picker, "observe", lambda *args, **kw: calls.append((args, kw)))
        report(viewer_client, 1, latency_ms=2310.5, prefix_hashes=[11, 12], output_tokens=212)
        a.learned()
    assert calls == [
        (
            (MODEL, 212),
            {"input_tokens": 1000, "prefix_hashes": (11, 12), "latency_s": 2.3105},
        )
    ]


def test_what_one_region_learns_every_region_of_the_process_uses(
    live: float, viewer_client: Any
) -> None:
    """One estimator and one latency tail per process: answers' lengths and the service's P99
    are not a region's own."""
    from regions.decisions import route as decisions

    long = {"endpoint": "euw-1", "model": MODEL, "input_tokens": 2000}  # eu-west's endpoint
    report(viewer_client, 60, **long, output_tokens=2500, prefix_hashes=[8080], latency_ms=900)
    before = expected_output(route(viewer_client, model=MODEL, prefix_hashes=[8080]))
    assert before == 2500  # learned from eu-west's completions, used in us-east
    learner = decisions.core().learner
    picker = learner.picker("ai_aware")
    assert picker.tail is learner.tail  # type: ignore[attr-defined]
    assert learner.tail.count >= 60
