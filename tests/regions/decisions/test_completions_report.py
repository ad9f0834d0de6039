"""POST /api/v1/route/completions: the contract, and every bad report refused whole.

A refused report answers in the one error format naming the field (``completions[3].model``)
and stores nothing, not even its good items.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.regions.loop.conftest import API, REGION_OF
from tests.regions.loop.test_heartbeat_rejects import assert_error

pytestmark = pytest.mark.django_db
URL = f"{API}/route/completions"
REGIONS = sorted(set(REGION_OF.values()))
GOOD = {
    "endpoint": "euw-1",
    "model": "llama-3-8b",
    "input_tokens": 1800,
    "output_tokens": 212,
    "latency_ms": 2310.5,
}


def item(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def without(name: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD.items() if k != name}


def post_raw(client: Any, body: bytes) -> Any:
    return client.generic("POST", URL, body, content_type="application/json")


def post(client: Any, doc: Any) -> Any:
    return post_raw(client, json.dumps(doc).encode())


def stored(store: Any) -> dict[str, list[Any]]:
    """Every region's stream, whole."""
    return {r: store.completions(r, None, 10**6) for r in REGIONS}


@pytest.fixture
def unchanged(loop_world: Any, fresh_hot_state: Any) -> Callable[[], Any]:
    """``with unchanged(): ...``: the streams are as before (one report stored first)."""
    from regions.decisions import completions

    completions.report(json.dumps({"completions": [GOOD]}).encode())

    @contextmanager
    def check() -> Iterator[None]:
        before = stored(fresh_hot_state)
        yield
        assert stored(fresh_hot_state) == before

    return check


def test_a_report_is_accepted_and_stored_by_region(
    viewer_client: Any, loop_world: Any, fresh_hot_state: Any
) -> None:
    from trafficmgr.contracts import Completion

    hashes = list(range(40))
    doc = {
        "completions": [
            item(prefix_hashes=hashes),
            item(endpoint="use-1", model="llama-3-70b", output_tokens=0, latency_ms=1),
            item(endpoint="euw-2", input_tokens=0, output_tokens=1_000_000),
        ]
    }
    response = post(viewer_client, doc)
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 3}
    streams = stored(fresh_hot_state)
    assert [c for _, c in streams["eu-west"]] == [
        Completion("euw-1", "llama-3-8b", 1800, 212, 2.3105, tuple(range(32))),
        Completion("euw-2", "llama-3-8b", 0, 1_000_000, 2.3105, ()),
    ]
    assert [c for _, c in streams["us-east"]] == [
        Completion("use-1", "llama-3-70b", 1800, 0, 0.001, ())
    ]
    assert streams["eu-central"] == streams["ap-south"] == []


def test_a_full_batch_of_1000_is_accepted(
    viewer_client: Any, loop_world: Any, fresh_hot_state: Any
) -> None:
    response = post(viewer_client, {"completions": [item(output_tokens=i) for i in range(1000)]})
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 1000}
    entries = fresh_hot_state.completions("eu-west", None, 5000)
    assert [c.output_tokens for _, c in entries] == list(range(1000))


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_any_api_token_may_report(make_client: Any, loop_world: Any, role: str) -> None:
    assert post(make_client(role), {"completions": [GOOD]}).status_code == 202


BAD = {
    # the report itself
    "completions missing": ({}, "completions", "required"),
    "completions not an array": ({"completions": GOOD}, "completions", "expected an array"),
    "no items": ({"completions": []}, "completions", "at least 1"),
    "too many items": ({"completions": [GOOD] * 1001}, "completions", "at most 1000"),
    "unknown top-level key": ({"completions": [GOOD], "x": 1}, "x", "unknown field"),
    "item not an object": ({"completions": [GOOD, [1, 2]]}, "completions[1]", "expected an object"),
    "item is null": ({"completions": [None]}, "completions[0]", "expected an object"),
    # missing fields
    **{
        f"{name} missing": ({"completions": [without(name)]}, f"completions[0].{name}", "required")
        for name in ("endpoint", "model", "input_tokens", "output_tokens", "latency_ms")
    },
    "unknown field": ({"completions": [item(ttft_ms=3)]}, "completions[0].ttft_ms", "unknown"),
    # wrong types
    "endpoint a number": ({"completions": [item(endpoint=5)]}, "completions[0].endpoint", "string"),
    "endpoint empty": ({"completions": [item(endpoint="")]}, "completions[0].endpoint", "0"),
    "endpoint nested junk": (
        {"completions": [item(endpoint={"a": [1, {"b": None}]})]},
        "completions[0].endpoint",
        "expected a string, got object",
    ),
    "model a list": ({"completions": [item(model=["x"])]}, "completions[0].model", "string"),
    "model too long": ({"completions": [item(model="m" * 64)]}, "completions[0].model", "64"),
    "output a string": (
        {"completions": [item(output_tokens="212")]},
        "completions[0].output_tokens",
        "expected an integer, got string",
    ),
    "output a fraction": (
        {"completions": [item(output_tokens=212.5)]},
        "completions[0].output_tokens",
        "fraction",
    ),
    "output a boolean": (
        {"completions": [item(output_tokens=True)]},
        "completions[0].output_tokens",
        "boolean",
    ),
    "input null": (
        {"completions": [item(input_tokens=None)]},
        "completions[0].input_tokens",
        "null",
    ),
    "latency a string": (
        {"completions": [item(latency_ms="2310")]},
        "completions[0].latency_ms",
        "expected a number, got string",
    ),
    "latency a boolean": (
        {"completions": [item(latency_ms=True)]},
        "completions[0].latency_ms",
        "boolean",
    ),
    "hashes a string": (
        {"completions": [item(prefix_hashes="abc")]},
        "completions[0].prefix_hashes",
        "expected an array",
    ),
    "hash a string": (
        {"completions": [item(prefix_hashes=[1, "2"])]},
        "completions[0].prefix_hashes[1]",
        "integer",
    ),
    "hash a fraction": (
        {"completions": [item(prefix_hashes=[1.5])]},
        "completions[0].prefix_hashes[0]",
        "fraction",
    ),
    "hash past 64 bits": (
        {"completions": [item(prefix_hashes=[2**64])]},
        "completions[0].prefix_hashes[0]",
        "outside",
    ),
    "too many hashes": (
        {"completions": [item(prefix_hashes=list(range(1025)))]},
        "completions[0].prefix_hashes",
        "at most 1024",
    ),
    # limits
    "output negative": (
        {"completions": [item(output_tokens=-1)]},
        "completions[0].output_tokens",
        "outside",
    ),
    "output over the limit": (
        {"completions": [item(output_tokens=1_000_001)]},
        "completions[0].output_tokens",
        "outside",
    ),
    "output huge": (
        {"completions": [item(output_tokens=10**40)]},
        "completions[0].output_tokens",
        "outside",
    ),
    "input negative": ({"completions": [item(input_tokens=-5)]}, "completions[0].input_tokens", ""),
    "latency zero": ({"completions": [item(latency_ms=0)]}, "completions[0].latency_ms", "more"),
    "latency negative": (
        {"completions": [item(latency_ms=-3.5)]},
        "completions[0].latency_ms",
        "more than 0",
    ),
    "latency an hour": (
        {"completions": [item(latency_ms=3_600_000)]},
        "completions[0].latency_ms",
        "less than",
    ),
    "latency huge": ({"completions": [item(latency_ms=1e308)]}, "completions[0].latency_ms", ""),
    "latency a huge integer": (
        {"completions": [item(latency_ms=10**400)]},
        "completions[0].latency_ms",
        "less than",
    ),
    # the fleet
    "unknown endpoint": (
        {"completions": [GOOD, item(endpoint="nope-9")]},
        "completions[1].endpoint",
        "unknown endpoint 'nope-9'",
    ),
    "model the endpoint does not serve": (
        {"completions": [item(endpoint="euw-2", model="llama-3-70b")]},
        "completions[0].model",
        "euw-2 does not serve 'llama-3-70b'",
    ),
    "model nobody serves": (
        {"completions": [item(model="gpt-99")]},
        "completions[0].model",
        "does not serve",
    ),
    # the bad item is the fourth: the three good ones before it are not stored either
    "bad fourth item": (
        {"completions": [GOOD, GOOD, GOOD, item(output_tokens=-1), GOOD]},
        "completions[3].output_tokens",
        "outside",
    ),
}


@pytest.mark.parametrize(("doc", "field", "words"), BAD.values(), ids=BAD.keys())
def test_bad_reports_are_refused_naming_the_field(
    viewer_client: Any, unchanged: Any, doc: Any, field: str, words: str
) -> None:
    with unchanged():
        body = assert_error(post(viewer_client, doc), 400, field)
    assert body["error"] == "invalid"
    assert words in body["detail"], body


@pytest.mark.parametrize("spelling", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_latencies_are_refused(
    viewer_client: Any, unchanged: Any, spelling: str
) -> None:
    text = json.dumps({"completions": [GOOD, item(latency_ms=12.25)]}).replace("12.25", spelling)
    with unchanged():
        assert_error(post_raw(viewer_client, text.encode()), 400, "completions[1].latency_ms")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"completions": [', "malformed JSON"),
        (b"not json at all", "malformed JSON"),
        (b"", "malformed JSON"),
        (b"[1, 2]", "expected an object"),
        (b'"completions"', "expected an object"),
        (b"\xff\xfe{}", "UTF-8"),
        (b'{"completions": [], "completions": []}', "duplicate key"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_what_is_not_a_json_object_is_refused(
    viewer_client: Any, unchanged: Any, body: bytes, words: str
) -> None:
    with unchanged():
        answer = assert_error(post_raw(viewer_client, body), 400)
    assert words in answer["detail"], answer


def test_an_oversized_body_is_413(viewer_client: Any, unchanged: Any) -> None:
    body = b'{"completions": [' + b" " * (1024 * 1024) + b"]}"
    with unchanged():
        assert_error(post_raw(viewer_client, body), 413)


def test_the_reports_own_size_bound_is_413(
    viewer_client: Any, unchanged: Any, monkeypatch: Any
) -> None:
    from regions.decisions import completions

    monkeypatch.setattr(completions, "MAX_BODY_BYTES", 1000)
    with unchanged():
        body = assert_error(post(viewer_client, {"completions": [GOOD] * 10}), 413)
    assert body["error"] == "too_large"


def test_no_token_is_401(anon_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(anon_client, {"completions": [GOOD]}), 401)


def test_a_wrong_token_is_401(anon_client: Any, unchanged: Any) -> None:
    anon_client.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    with unchanged():
        assert_error(post(anon_client, {"completions": [GOOD]}), 401)


def test_an_agent_token_is_403(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), {"completions": [GOOD]}), 403)


def test_only_post(viewer_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert viewer_client.get(URL).status_code == 405


def test_reports_share_the_decisions_rate_limit(
    viewer_client: Any, unchanged: Any, monkeypatch: Any
) -> None:
    from rest_framework.settings import api_settings

    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "loop": "2/min"}
    monkeypatch.setattr(api_settings, "DEFAULT_THROTTLE_RATES", rates)
    assert post(viewer_client, {"completions": [GOOD]}).status_code == 202
    assert post(viewer_client, {"completions": [GOOD]}).status_code == 202
    with unchanged():
        response = post(viewer_client, {"completions": [GOOD]})
    assert response.status_code == 429
    assert "Retry-After" in response


def test_the_schema_describes_it(viewer_client: Any, db: None) -> None:
    schema = viewer_client.get("/api/schema/?format=json").json()
    post_op = schema["paths"]["/api/v1/route/completions"]["post"]
    assert {"202", "400", "401", "403", "413", "429"} <= set(post_op["responses"])
    error = post_op["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
    assert error == "#/components/schemas/Error"
    accepted = post_op["responses"]["202"]["content"]["application/json"]["examples"]
    assert next(iter(accepted.values()))["value"] == {"accepted": 1}
    example = next(iter(post_op["requestBody"]["content"]["application/json"]["examples"].values()))
    assert example["value"]["completions"][0]["endpoint"] == "euw-1"
