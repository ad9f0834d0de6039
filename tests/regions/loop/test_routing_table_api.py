"""GET /api/v1/routing/table and /routing/history."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.regions.loop.conftest import API, ENDPOINTS

pytestmark = pytest.mark.django_db


def test_before_the_first_tick_the_static_table_says_so(
    viewer_client: Any, loop_world: Any
) -> None:
    response = viewer_client.get(f"{API}/routing/table")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["source"] == "static"
    assert {s["state"] for s in body["regions"].values()} == {"unknown"}
    assert {w["region"] for w in body["zones"]["GB"]["llama-3-70b"]} <= {"eu-west", "eu-central"}


def test_after_a_tick_the_published_table(
    viewer_client: Any, feed: Any, fresh_hot_state: Any
) -> None:
    from regions.loop.control import run_tick

    now = time.time()
    feed(now)
    run_tick(now)
    body = viewer_client.get(f"{API}/routing/table").json()
    assert body["source"] == "published"
    assert body["version"] == fresh_hot_state.table_version()
    assert set(body) >= {"version", "generated_at", "regions", "zones"}
    assert body["regions"]["eu-west"]["state"] == "healthy"
    for lists in body["zones"].values():
        for entries in lists.values():
            if entries:
                assert sum(e["weight"] for e in entries) == pytest.approx(1.0)
                assert all(e["reason"] for e in entries)


def test_history_pages_through_versions_with_diffs(viewer_client: Any, feed: Any) -> None:
    from regions.loop.control import run_tick

    t0 = 1_800_000_000.0
    feed(t0)
    run_tick(t0, interval_s=1)
    others = [e for e in ENDPOINTS if not e.startswith("euw")]
    for k in range(1, 5):
        feed(t0 + k, others)
        run_tick(t0 + k, interval_s=1)
    page = viewer_client.get(f"{API}/routing/history?limit=1").json()
    assert page["count"] == 2 and len(page["results"]) == 1 and page["next"]
    newest = page["results"][0]
    changes = [(c["region"], c["old"], c["new"]) for c in newest["diff"]["regions"]]
    assert changes == [("eu-west", "healthy", "down")]
    assert "eu-west healthy → down" in newest["reason"]
    assert "table" not in newest
    detail = viewer_client.get(f"{API}/routing/history/{newest['version']}").json()
    assert detail["table"]["version"] == newest["version"]


def test_reading_needs_a_token(anon_client: Any, agent_api: Any, loop_world: Any) -> None:
    assert anon_client.get(f"{API}/routing/table").status_code == 401
    assert agent_api("eu-west").get(f"{API}/routing/history").status_code == 403
