"""Refused heartbeats: each bad input answered in the one error format, state unchanged."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.regions.loop.conftest import API, hb_doc

pytestmark = pytest.mark.django_db


def post_raw(client: Any, body: bytes) -> Any:
    return client.generic("POST", f"{API}/heartbeats/", body, content_type="application/json")


def post(client: Any, doc: Any) -> Any:
    return post_raw(client, json.dumps(doc).encode())


def picture(store: Any) -> dict[str, Any]:
    from regions.models import HeartbeatSample

    return {
        "heartbeats": store.heartbeats(),
        "samples": HeartbeatSample.objects.count(),
        "machines": store.machines(),
    }


@pytest.fixture
def unchanged(fresh_hot_state: Any, agent_api: Any) -> Callable[[], Any]:
    """``with unchanged(): ...``: the hot state and the history are as before (one prior beat)."""
    from contextlib import contextmanager

    assert post(agent_api("eu-west"), hb_doc("euw-1", 100, time.time())).status_code == 200

    @contextmanager
    def check() -> Iterator[None]:
        before = picture(fresh_hot_state)
        yield
        assert picture(fresh_hot_state) == before

    return check


def assert_error(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:300])
    body = response.json()
    assert set(body) >= {"error", "detail", "fields"}, body
    if field is not None:
        assert field in body["fields"], body
        assert field in body["detail"], body
    return body


def gpu_doc(**changes: Any) -> dict[str, Any]:
    doc = hb_doc("euw-1", 200, time.time(), gpus=1)
    doc["gpus"][0].update(changes)
    return doc


def test_malformed_json(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        body = assert_error(post_raw(agent_api("eu-west"), b'{"endpoint": "euw-1",'), 400)
    assert body["error"] == "invalid" and "malformed JSON" in body["detail"]


def test_a_json_array_is_not_a_heartbeat(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), [1, 2]), 400, "body")


@pytest.mark.parametrize("spelling", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_name_the_field(agent_api: Any, unchanged: Any, spelling: str) -> None:
    text = json.dumps(gpu_doc(util_pct=12.5)).replace("12.5", spelling)
    with unchanged():
        body = assert_error(post_raw(agent_api("eu-west"), text.encode()), 400, "gpus[0].util_pct")
    assert "finite" in body["detail"]


@pytest.mark.parametrize("util", [-0.1, 100.01, 250])
def test_utilisation_outside_0_to_100(agent_api: Any, unchanged: Any, util: float) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), gpu_doc(util_pct=util)), 400, "gpus[0].util_pct")


def test_memory_used_above_total(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(
            post(agent_api("eu-west"), gpu_doc(mem_used_mb=90000.0, mem_total_mb=81559.0)),
            400,
            "gpus[0].mem_used_mb",
        )


def test_ten_thousand_gpus(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 200, time.time(), gpus=10_000)
    with unchanged():
        body = assert_error(post(agent_api("eu-west"), doc), 413)
    assert body["error"] == "too_large"


def test_sixty_five_gpus(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 200, time.time(), gpus=65)
    with unchanged():
        body = assert_error(post(agent_api("eu-west"), doc), 400, "gpus")
    assert "at most 64" in body["detail"]


def test_unknown_endpoint(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        body = assert_error(
            post(agent_api("eu-west"), hb_doc("nope-9", 1, time.time())), 400, "endpoint"
        )
    assert "nope-9" in body["detail"]


def test_another_regions_endpoint(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        body = assert_error(
            post(agent_api("us-east"), hb_doc("euw-1", 999, time.time())), 403, "endpoint"
        )
    assert body["error"] == "permission_denied"


def test_an_api_token_may_not_post_heartbeats(make_client: Any, unchanged: Any) -> None:
    with unchanged():
        for role in ("viewer", "operator", "admin"):
            assert_error(post(make_client(role), hb_doc("euw-1", 999, time.time())), 403)


def test_no_token(anon_client: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(anon_client, hb_doc("euw-1", 999, time.time())), 401)


def test_replayed_seq_is_ignored_idempotently(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        response = post(agent_api("eu-west"), hb_doc("euw-1", 100, time.time(), util=99.0))
    assert response.status_code == 200
    assert response.json() == {"accepted": False, "reason": "stale seq"}


def test_out_of_order_seq_is_ignored(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        response = post(agent_api("eu-west"), hb_doc("euw-1", 99, time.time()))
    assert response.json() == {"accepted": False, "reason": "stale seq"}


@pytest.mark.parametrize("offset", [86400.0, 301.0, 31.0, -601.0, -86401.0, -7 * 86400.0])
def test_sent_at_too_far_from_now(agent_api: Any, unchanged: Any, offset: float) -> None:
    with unchanged():
        assert_error(
            post(agent_api("eu-west"), hb_doc("euw-1", 200, time.time() + offset)), 400, "sent_at"
        )


def test_sent_at_not_a_time(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 200, time.time())
    doc["sent_at"] = "yesterday"
    with unchanged():
        assert_error(post(agent_api("eu-west"), doc), 400, "sent_at")


def test_one_megabyte_body(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 200, time.time())
    doc["agent"]["version"] = "x" * 1_048_576
    with unchanged():
        assert_error(post(agent_api("eu-west"), doc), 413)


def test_unknown_key(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), gpu_doc(fan_rpm=1200)), 400, "gpus[0].fan_rpm")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("util_pct", "12"),
        ("index", 1.5),
        ("index", True),
        ("lost", 1),
        ("throttle_reasons", "hw_slowdown"),
    ],
)
def test_wrong_types_are_not_coerced(
    agent_api: Any, unchanged: Any, field: str, value: Any
) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), gpu_doc(**{field: value})), 400, f"gpus[0].{field}")


def test_string_too_long(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), gpu_doc(uuid="G" * 129)), 400, "gpus[0].uuid")


def test_negative_seq(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post(agent_api("eu-west"), hb_doc("euw-1", -1, time.time())), 400, "seq")


def test_missing_seq(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 1, time.time())
    del doc["seq"]
    with unchanged():
        assert_error(post(agent_api("eu-west"), doc), 400, "seq")


def test_duplicate_keys(agent_api: Any, unchanged: Any) -> None:
    text = json.dumps(hb_doc("euw-1", 200, time.time()))
    text = text.replace('"seq": 200', '"seq": 200, "seq": 300')
    with unchanged():
        assert_error(post_raw(agent_api("eu-west"), text.encode()), 400, "body")


def test_kv_cache_usage_is_a_fraction(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 200, time.time(), kv=85.0)
    with unchanged():
        assert_error(post(agent_api("eu-west"), doc), 400, "server.kv_cache_usage")


def test_duplicate_gpu_index(agent_api: Any, unchanged: Any) -> None:
    doc = hb_doc("euw-1", 200, time.time(), gpus=2)
    doc["gpus"][1]["index"] = 0
    with unchanged():
        assert_error(post(agent_api("eu-west"), doc), 400, "gpus[1].index")


def test_not_utf8(agent_api: Any, unchanged: Any) -> None:
    with unchanged():
        assert_error(post_raw(agent_api("eu-west"), b'{"endpoint": "\xff"}'), 400, "body")
