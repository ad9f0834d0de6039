"""server.output_tokens: the servers' own output-length histograms, from heartbeat to route.

Ingest takes them strictly (a bad one is refused naming the field, state unchanged), both hot
states carry them, and the decision API's picker learns the expected output length from them.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from typing import Any

import pytest

from tests.regions.loop import test_heartbeat_rejects as rejects
from tests.regions.loop.conftest import API, ENDPOINTS, REGION_OF, US_IP, hb_doc
from tests.regions.loop.test_heartbeat_rejects import assert_error, post
from trafficmgr.routing.types import Heartbeat, OutputHistogram, ServerSample

pytestmark = pytest.mark.django_db
unchanged = rejects.unchanged  # the fixture: state as before a refused heartbeat

# Every request generated 1,400..1,600 tokens.
AROUND_1500 = {"le": [1000.0, 1400.0, 1600.0], "counts": [0, 0, 900], "count": 900}


def with_lengths(doc: dict[str, Any], lengths: Any) -> dict[str, Any]:
    doc["server"]["output_tokens"] = lengths
    return doc


def test_a_heartbeat_with_histograms_is_stored_with_them(
    agent_api: Any, fresh_hot_state: Any
) -> None:
    doc = with_lengths(hb_doc("euw-1", 100, time.time()), {"llama-3-70b": AROUND_1500})
    assert post(agent_api("eu-west"), doc).status_code == 200
    server = fresh_hot_state.heartbeats()["euw-1"].server
    assert server.output_tokens == (
        OutputHistogram("llama-3-70b", (1000.0, 1400.0, 1600.0), (0, 0, 900), 900),
    )


def test_a_heartbeat_without_them_stores_none(agent_api: Any, fresh_hot_state: Any) -> None:
    assert post(agent_api("eu-west"), hb_doc("euw-1", 100, time.time())).status_code == 200
    assert fresh_hot_state.heartbeats()["euw-1"].server.output_tokens == ()


def test_the_redis_hot_state_carries_them(redis_store: Any) -> None:
    lengths = (OutputHistogram("llama-3-8b", (10.0, 20.0), (3, 7), 8),)
    hb = Heartbeat("euw-1", 1, 1.0, 2.0, (), ServerSample("vllm", output_tokens=lengths))
    assert redis_store.put_heartbeat(hb, 0).accepted
    assert redis_store.heartbeats(["euw-1"])["euw-1"] == hb
    lean = redis_store.heartbeats(histograms=False)["euw-1"]  # as the control loop reads them
    assert lean == replace(hb, server=ServerSample("vllm"))
    assert redis_store.heartbeats()["euw-1"] == hb  # each way has its own decoded copy


def test_heartbeats_stored_before_the_histograms_moved_out_still_decode() -> None:
    from trafficmgr.contracts import decode_heartbeat

    raw = (
        '{"endpoint":"euw-1","seq":1,"sent_at":1.0,"received_at":2.0,"gpus":[],"server":'
        '{"kind":"vllm","output_tokens":[{"model":"m","le":[10.0],"counts":[3],"count":4}]}}'
    )
    hb = decode_heartbeat(raw)
    assert hb.server is not None
    assert hb.server.output_tokens == (OutputHistogram("m", (10.0,), (3,), 4),)


def _bad(field: str, value: Any) -> dict[str, Any]:
    return {**AROUND_1500, field: value}


@pytest.mark.parametrize(
    ("lengths", "field", "words"),
    [
        ([1, 2], "server.output_tokens", "expected an object"),
        ({f"m{i}": AROUND_1500 for i in range(17)}, "server.output_tokens", "at most 16"),
        ({"x" * 129: AROUND_1500}, "server.output_tokens." + "x" * 64, "model name"),
        ({"m": [1]}, "server.output_tokens.m", "expected an object"),
        ({"m": {**AROUND_1500, "sum": 3}}, "server.output_tokens.m.sum", "unknown field"),
        ({"m": {"le": [], "counts": []}}, "server.output_tokens.m.count", "required"),
        ({"m": _bad("le", "1,2")}, "server.output_tokens.m.le", "expected an array"),
        (
            {"m": {"le": [float(i + 1) for i in range(65)], "counts": [0] * 65, "count": 0}},
            "server.output_tokens.m.le",
            "at most 64",
        ),
        ({"m": _bad("le", [1000.0, 900.0, 1600.0])}, "server.output_tokens.m.le[1]", "ascending"),
        ({"m": _bad("le", [1000.0, 1000.0, 1600.0])}, "server.output_tokens.m.le[1]", "ascending"),
        ({"m": _bad("le", [0.0, 1400.0, 1600.0])}, "server.output_tokens.m.le[0]", "positive"),
        ({"m": _bad("le", [1.0, "2", 3.0])}, "server.output_tokens.m.le[1]", "finite number"),
        ({"m": _bad("le", [1.0, True, 3.0])}, "server.output_tokens.m.le[1]", "finite number"),
        ({"m": _bad("counts", [0, 900])}, "server.output_tokens.m.counts", "2 counts for 3"),
        ({"m": _bad("counts", [0, 901, 900])}, "server.output_tokens.m.counts[2]", "decrease"),
        ({"m": _bad("counts", [0, -1, 900])}, "server.output_tokens.m.counts[1]", "non-negative"),
        ({"m": _bad("counts", [0, 0.5, 900])}, "server.output_tokens.m.counts[1]", "integer"),
        ({"m": _bad("count", 899)}, "server.output_tokens.m.count", "below"),
        ({"m": _bad("count", 900.0)}, "server.output_tokens.m.count", "integer"),
        ({"m": _bad("count", 2**53)}, "server.output_tokens.m.count", "integer"),
    ],
)
def test_bad_histograms_are_refused_naming_the_field(
    agent_api: Any, unchanged: Any, lengths: Any, field: str, words: str
) -> None:
    doc = with_lengths(hb_doc("euw-1", 200, time.time()), lengths)
    with unchanged():
        body = assert_error(post(agent_api("eu-west"), doc), 400, field)
    assert words in body["detail"], body


@pytest.mark.parametrize("spelling", ["NaN", "Infinity", "1e999"])
def test_non_finite_bounds_are_refused(agent_api: Any, unchanged: Any, spelling: str) -> None:
    doc = with_lengths(hb_doc("euw-1", 200, time.time()), {"m": _bad("le", [1.0, 2.5, 3.0])})
    text = json.dumps(doc).replace("2.5", spelling)
    with unchanged():
        response = agent_api("eu-west").generic(
            "POST", f"{API}/heartbeats/", text.encode(), content_type="application/json"
        )
        assert_error(response, 400, "server.output_tokens.m.le[1]")


def _expected_output(response: Any) -> float:
    assert response.status_code == 200, response.content
    match = re.search(r"~(\d+) output tokens", response.json()["reason"])
    assert match is not None, response.json()["reason"]
    return float(match.group(1))


def _route(client: Any) -> Any:
    doc = {"model": "llama-3-70b", "client_ip": US_IP, "input_tokens": 500}
    doc["max_output_tokens"] = 8000
    body = json.dumps(doc).encode()
    return client.generic("POST", f"{API}/route", body, content_type="application/json")


def _feed_lengths(agent_tokens: dict[str, Any], at: float, lengths: Any) -> None:
    from regions.loop import ingest

    for name in ENDPOINTS:
        doc = with_lengths(hb_doc(name, int(at * 1000), at), lengths)
        result = ingest.ingest(agent_tokens[REGION_OF[name]][0], json.dumps(doc).encode(), at)
        assert result.accepted, result.body


def test_route_decisions_learn_output_lengths_from_the_servers(
    viewer_client: Any, agent_tokens: dict[str, Any], feed: Any, monkeypatch: Any
) -> None:
    from regions.decisions import route as decisions
    from regions.fleet import snapshot
    from regions.loop.control import run_tick

    monkeypatch.setattr(decisions, "LOADS_TTL_S", 0.0)  # read again on every request
    decisions.forget()
    now = time.time()
    feed(now)
    assert run_tick(now).ran
    prior = _expected_output(_route(viewer_client))
    assert prior < 200  # the estimator's prior (128 tokens)

    _feed_lengths(agent_tokens, now + 1, {"llama-3-70b": AROUND_1500})
    learned = _expected_output(_route(viewer_client))
    assert 1400 <= learned <= 1600

    estimator = decisions.core().learner.estimator
    seen = estimator.count("llama-3-70b")
    fleet = snapshot.current().fleet
    serving = [e for r in fleet.regions for e in r.endpoints if "llama-3-70b" in e.models]
    assert seen == 900 * len(serving)  # every endpoint serving the model, each once
    _feed_lengths(agent_tokens, now + 2, {"llama-3-70b": AROUND_1500})  # nothing new
    _expected_output(_route(viewer_client))
    assert estimator.count("llama-3-70b") == seen


def _hb(received_at: float, counts: tuple[int, ...], count: int) -> Heartbeat:
    h = OutputHistogram("llama-3-70b", (100.0, 200.0), counts, count)
    return Heartbeat(
        "use-1", 1, received_at, received_at, (), ServerSample("vllm", output_tokens=(h,))
    )


def test_deltas_count_growth_once_and_a_restart_in_full(loop_world: Any) -> None:
    from regions.fleet import snapshot
    from trafficmgr.requestpath.learning import Learner

    region = snapshot.current().fleet.region("us-east")
    learner = Learner()  # what /route's core learns with
    est = learner.estimator
    learner.learn_heartbeats(region, {"use-1": _hb(10.0, (5, 10), 10)})
    assert est.count("llama-3-70b") == 10  # first sight: the server's history
    learner.learn_heartbeats(region, {"use-1": _hb(10.0, (5, 10), 10)})
    learner.learn_heartbeats(region, {"use-1": _hb(9.0, (9, 19), 19)})
    assert est.count("llama-3-70b") == 10  # the same beat, an older one: nothing
    learner.learn_heartbeats(region, {"use-1": _hb(11.0, (8, 15), 16)})
    assert est.count("llama-3-70b") == 16  # grew by 6
    learner.learn_heartbeats(region, {"use-1": _hb(12.0, (1, 2), 3)})
    assert est.count("llama-3-70b") == 19  # went down: restarted, all 3 are new


def _h(le: tuple[float, ...], counts: tuple[int, ...], count: int) -> OutputHistogram:
    return OutputHistogram("m", le, counts, count)


def test_deltas_follow_bounds_the_agent_leaves_out() -> None:
    from trafficmgr.routing.decision import histogram_delta

    # a longer output arrived: the top bound moved up (the agent drops bounds past the full one)
    prev = _h((10.0, 20.0, 50.0), (0, 13, 20), 20)
    assert histogram_delta(_h((10.0, 20.0, 50.0, 100.0), (0, 13, 25, 30), 30), prev) == (
        (0, 0, 5, 10),
        10,
    )
    # a shorter one arrived: the bottom bound moved down (empty bounds below are dropped)
    prev = _h((10.0, 20.0), (0, 5), 5)
    assert histogram_delta(_h((5.0, 10.0, 20.0), (0, 1, 6), 6), prev) == ((0, 1, 1), 1)
    # the same bounds: plain differences; a count that went down: a restart, all of it new
    assert histogram_delta(_h((10.0,), (7,), 9), _h((10.0,), (4,), 5)) == ((3,), 4)
    assert histogram_delta(_h((10.0,), (2,), 3), _h((10.0,), (4,), 5)) == ((2,), 3)
