"""The ASGI front answers completion reports like Django would (large ones off the loop)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.regions.decisions.test_completions_report import GOOD, URL, item, stored
from tests.regions.loop.asgi_calls import Recorder, call
from tests.regions.loop.test_loop_front import bearer, django_app, front, same_reply, secrets

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["django_app", "front", "secrets"]  # fixtures


def send(app: Any, secret: str, doc: Any) -> Any:
    return call(app, URL, json.dumps(doc).encode(), bearer(secret))


@pytest.mark.parametrize("items", [1, 400], ids=["inline", "in a thread"])
def test_a_report_is_answered_by_the_front_like_django(
    front: Any, django_app: Recorder, secrets: dict[str, str], fresh_hot_state: Any, items: int
) -> None:
    from regions.api.fastfront.front import INLINE_REPORT_BYTES

    doc = {"completions": [item(output_tokens=i) for i in range(items)]}
    assert (len(json.dumps(doc)) > INLINE_REPORT_BYTES) == (items > 1)
    ours = send(front, secrets["viewer"], doc)
    assert django_app.paths == []
    theirs = send(django_app, secrets["viewer"], doc)
    same_reply(ours, theirs)
    assert ours.status == 202 and ours.json() == {"accepted": items}
    assert len(fresh_hot_state.completions("eu-west", None, 10_000)) == 2 * items


@pytest.mark.parametrize(
    ("doc", "status", "field"),
    [
        ({"completions": []}, 400, "completions"),
        ({"completions": [GOOD, item(endpoint="nope-9")]}, 400, "completions[1].endpoint"),
        (
            {"completions": [item(endpoint="euw-2", model="llama-3-70b")]},
            400,
            "completions[0].model",
        ),
        ({"completions": [item(latency_ms=0)] * 300}, 400, "completions[0].latency_ms"),
    ],
)
def test_refused_reports_match_django(
    front: Any,
    django_app: Recorder,
    secrets: dict[str, str],
    fresh_hot_state: Any,
    doc: Any,
    status: int,
    field: str,
) -> None:
    ours = send(front, secrets["viewer"], doc)
    assert django_app.paths == []
    theirs = send(django_app, secrets["viewer"], doc)
    same_reply(ours, theirs)
    assert ours.status == status and field in ours.json()["fields"]
    assert all(not entries for entries in stored(fresh_hot_state).values())


@pytest.mark.parametrize(("secret", "status"), [(None, 401), ("eu-west", 403), ("tmk_x", 401)])
def test_who_may_not_is_answered_by_django(
    front: Any,
    django_app: Recorder,
    secrets: dict[str, str],
    fresh_hot_state: Any,
    secret: str | None,
    status: int,
) -> None:
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers["authorization"] = f"Bearer {secrets.get(secret, secret)}"
    reply = call(front, URL, json.dumps({"completions": [GOOD]}).encode(), headers)
    assert reply.status == status
    assert django_app.paths == [URL]
    assert all(not entries for entries in stored(fresh_hot_state).values())
