"""The ASGI front of the hot paths answers like Django would, and hands over what it should not.

Each test sends requests through ``LoopFront`` wrapping Django's own ASGI handler, behind a
recorder that says which requests reached Django. The database is shared with the front's
thread, hence transactional tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.regions.loop.asgi_calls import AsgiReply, Recorder, call
from tests.regions.loop.conftest import API, GB_IP, US_IP, hb_doc

pytestmark = pytest.mark.django_db(transaction=True)
HEARTBEATS = f"{API}/heartbeats/"
ROUTE = f"{API}/route"
JSON = {"content-type": "application/json"}


@pytest.fixture
def django_app() -> Recorder:
    from django.core.handlers.asgi import ASGIHandler

    return Recorder(ASGIHandler())


@pytest.fixture
def front(django_app: Recorder) -> Iterator[Any]:
    from regions.api.fastfront.front import LoopFront

    app = LoopFront(django_app, enabled=True)
    yield app
    app.close()


@pytest.fixture
def secrets(agent_tokens: dict[str, Any], make_client: Any) -> dict[str, str]:
    """Bearer secrets: an agent token of eu-west and us-east, a viewer token."""
    return {
        "eu-west": agent_tokens["eu-west"][1],
        "us-east": agent_tokens["us-east"][1],
        "viewer": make_client("viewer").token_secret,
    }


def bearer(secret: str, **more: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}", **JSON, **more}


def beat(app: Any, secret: str, doc: Any, **headers: str) -> AsgiReply:
    return call(app, HEARTBEATS, json.dumps(doc).encode(), bearer(secret, **headers))


def route(app: Any, secret: str, **body: Any) -> AsgiReply:
    doc = {"model": "llama-3-70b", "input_tokens": 1800, "max_output_tokens": 256, **body}
    return call(app, ROUTE, json.dumps(doc).encode(), bearer(secret))


def same_reply(ours: AsgiReply, theirs: AsgiReply) -> None:
    """Status, headers (but the length) and JSON body as Django would have answered."""
    assert ours.status == theirs.status, (ours, theirs)
    drop = {"Content-Length"}
    assert {k: v for k, v in ours.headers.items() if k not in drop} == {
        k: v for k, v in theirs.headers.items() if k not in drop
    }
    assert ours.json() == theirs.json()


def test_a_heartbeat_is_answered_by_the_front_like_django(
    front: Any, django_app: Recorder, secrets: dict[str, str], fresh_hot_state: Any
) -> None:
    now = time.time()
    ours = beat(front, secrets["eu-west"], hb_doc("euw-1", 1, now))
    assert django_app.paths == []
    theirs = beat(django_app, secrets["eu-west"], hb_doc("euw-2", 1, now))
    same_reply(ours, theirs)
    assert ours.json() == {"accepted": True, "interval_s": 1.0}
    assert set(fresh_hot_state.heartbeats()) == {"euw-1", "euw-2"}
    counters = fresh_hot_state.counters()
    assert counters["heartbeats|reason=ok\x1fresult=accepted"] == 2


@pytest.mark.parametrize(
    ("doc", "status", "field"),
    [
        (lambda now: hb_doc("euw-1", 1, now, util=101.0), 400, "gpus[0].util_pct"),
        (lambda now: hb_doc("nope-9", 1, now), 400, "endpoint"),
        (lambda now: hb_doc("use-1", 1, now), 403, "endpoint"),
        (lambda now: hb_doc("euw-1", 1, now + 3600), 400, "sent_at"),
        (lambda now: [1, 2], 400, "body"),
    ],
)
def test_refused_heartbeats_match_django(
    front: Any,
    django_app: Recorder,
    secrets: dict[str, str],
    fresh_hot_state: Any,
    doc: Any,
    status: int,
    field: str,
) -> None:
    now = time.time()
    ours = beat(front, secrets["eu-west"], doc(now))
    assert django_app.paths == []
    theirs = beat(django_app, secrets["eu-west"], doc(now))
    same_reply(ours, theirs)
    assert ours.status == status and field in ours.json()["fields"]
    assert fresh_hot_state.heartbeats() == {}


def test_a_stale_seq_is_answered_like_django(
    front: Any, django_app: Recorder, secrets: dict[str, str]
) -> None:
    now = time.time()
    assert beat(front, secrets["eu-west"], hb_doc("euw-1", 5, now)).status == 200
    ours = beat(front, secrets["eu-west"], hb_doc("euw-1", 5, now))
    theirs = beat(django_app, secrets["eu-west"], hb_doc("euw-1", 5, now))
    same_reply(ours, theirs)
    assert ours.json() == {"accepted": False, "reason": "stale seq"}


def test_history_rows_are_written_off_the_request(
    front: Any, secrets: dict[str, str], fresh_hot_state: Any
) -> None:
    from regions.models import HeartbeatSample

    now = time.time()
    assert beat(front, secrets["eu-west"], hb_doc("euw-1", 1, now)).status == 200
    front.history.flush()
    assert list(HeartbeatSample.objects.values_list("endpoint__name", flat=True)) == ["euw-1"]


def test_an_agent_bound_to_endpoints_not_a_region(
    front: Any, django_app: Recorder, loop_world: Any
) -> None:
    from regions.access.issue import create_token
    from regions.models import AgentToken, Endpoint

    token, secret = create_token("pinned", "agent", region="eu-central", created_by="tests")
    AgentToken.objects.filter(pk=token.pk).update(region=None)
    token.region = None
    token.endpoints.set([Endpoint.objects.get(name="euc-1")])
    now = time.time()
    assert beat(front, secret, hb_doc("euc-1", 1, now)).status == 200
    refused = beat(front, secret, hb_doc("euw-1", 1, now))
    assert refused.status == 403 and refused.json()["error"] == "permission_denied"
    assert django_app.paths == []


def test_a_decision_is_answered_by_the_front_like_django(
    front: Any, django_app: Recorder, secrets: dict[str, str], feed: Any
) -> None:
    from regions.loop.control import run_tick

    now = time.time()
    feed(now)
    run_tick(now)
    ours = route(front, secrets["viewer"], client_ip=US_IP)
    assert django_app.paths == []
    theirs = route(django_app, secrets["viewer"], client_ip=US_IP)
    assert ours.status == theirs.status == 200
    assert ours.headers.keys() == theirs.headers.keys()
    assert {k: ours.headers[k] for k in ours.headers if k != "Content-Length"} == {
        k: theirs.headers[k] for k in theirs.headers if k != "Content-Length"
    }
    assert ours.json()["region"] == theirs.json()["region"] == "us-east"
    assert ours.json().keys() == theirs.json().keys()


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"client_ip": US_IP, "input_tokens": 0}, 400, "input_tokens"),
        ({"client_country": "de"}, 400, "client_country"),
        ({"client_ip": US_IP, "model": "gpt-9"}, 400, "model"),
        ({"client_ip": GB_IP}, 503, None),
    ],
)
def test_refused_decisions_match_django(
    front: Any,
    django_app: Recorder,
    secrets: dict[str, str],
    feed: Any,
    body: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    from regions.loop.control import run_tick

    now = time.time()
    feed(now - 10, ["euw-1", "euw-2", "euc-1"])  # the EU is down, fail_closed
    feed(now, ["use-1", "aps-1"])
    run_tick(now)
    ours = route(front, secrets["viewer"], **body)
    assert django_app.paths == []
    theirs = route(django_app, secrets["viewer"], **body)
    same_reply(ours, theirs)
    assert ours.status == status
    if field is None:
        assert ours.json()["error"] == "no_capacity" and int(ours.headers["Retry-After"]) >= 1
    else:
        assert field in ours.json()["fields"]


def test_the_rate_limit_is_the_views_one(
    front: Any, django_app: Recorder, secrets: dict[str, str], settings: Any
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "loop": "3/min",
        },
    }
    now = time.time()
    codes = [beat(front, secrets["eu-west"], hb_doc("euw-1", i, now)).status for i in (1, 2, 3)]
    ours = beat(front, secrets["eu-west"], hb_doc("euw-1", 4, now))
    theirs = beat(django_app, secrets["eu-west"], hb_doc("euw-1", 5, now))  # same window
    assert codes == [200, 200, 200]
    same_reply(ours, theirs)
    assert ours.status == 429 and ours.json()["error"] == "throttled"
    assert 1 <= int(ours.headers["Retry-After"]) <= 60


@pytest.mark.parametrize(
    ("secret", "path", "status"),
    [
        (None, HEARTBEATS, 401),
        ("tma_not-a-token", HEARTBEATS, 401),
        ("viewer", HEARTBEATS, 403),  # an API token posting heartbeats
        ("eu-west", ROUTE, 403),  # an agent token asking for a route
        ("tmk_not-a-token", ROUTE, 401),
    ],
)
def test_who_may_not_is_answered_by_django(
    front: Any,
    django_app: Recorder,
    secrets: dict[str, str],
    fresh_hot_state: Any,
    secret: str | None,
    path: str,
    status: int,
) -> None:
    headers = dict(JSON)
    if secret is not None:
        headers["authorization"] = f"Bearer {secrets.get(secret, secret)}"
    body = json.dumps(hb_doc("euw-1", 1, time.time())).encode()
    reply = call(front, path, body, headers)
    assert reply.status == status
    assert set(reply.json()) == {"error", "detail", "fields"}
    assert django_app.paths == [path]
    assert fresh_hot_state.heartbeats() == {}


def test_a_revoked_token_is_refused_at_once(
    front: Any, django_app: Recorder, secrets: dict[str, str]
) -> None:
    from regions.models import AgentToken

    now = time.time()
    assert beat(front, secrets["eu-west"], hb_doc("euw-1", 1, now)).status == 200
    token = AgentToken.objects.get(name="agent-eu-west")
    token.revoked_at = token.created_at
    token.save(update_fields=["revoked_at"])
    assert beat(front, secrets["eu-west"], hb_doc("euw-1", 2, now)).status == 401


@pytest.mark.parametrize(
    ("headers", "query", "status"),
    [
        ({"accept": "text/html"}, b"", 200),  # DRF's browsable page
        ({}, b"format=json", 200),
        ({"host": "evil.example"}, b"", 400),
        ({"content-length": "2000000"}, b"", 413),
        ({"content-length": "12abc"}, b"", 400),
    ],
)
def test_unusual_requests_are_left_to_django(
    front: Any,
    django_app: Recorder,
    secrets: dict[str, str],
    headers: dict[str, str],
    query: bytes,
    status: int,
) -> None:
    doc = hb_doc("euw-1", 1, time.time())
    reply = call(
        front,
        HEARTBEATS,
        json.dumps(doc).encode(),
        bearer(secrets["eu-west"], **headers),
        query=query,
    )
    assert reply.status == status
    assert django_app.paths == [HEARTBEATS]


def test_a_body_over_the_limit_without_a_length_is_replayed_to_django(
    front: Any, django_app: Recorder, secrets: dict[str, str]
) -> None:
    doc = hb_doc("euw-1", 1, time.time())
    doc["agent"]["version"] = "x" * 1_100_000
    text = json.dumps(doc).encode()
    chunks = [text[i : i + 65536] for i in range(0, len(text), 65536)]
    reply = call(front, HEARTBEATS, headers=bearer(secrets["eu-west"]), chunks=chunks)
    assert reply.status == 413 and reply.json()["error"] == "too_large"
    assert django_app.paths == [HEARTBEATS]


def test_ssl_redirect_is_left_to_django_and_https_gets_hsts(
    secrets: dict[str, str], settings: Any
) -> None:
    from django.core.handlers.asgi import ASGIHandler

    from regions.api.fastfront.front import LoopFront

    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 3600
    django_app = Recorder(ASGIHandler())  # the security middleware reads settings at start
    front = LoopFront(django_app, enabled=True)
    now = time.time()
    https = {"x-forwarded-proto": "https"}
    assert beat(front, secrets["eu-west"], hb_doc("euw-1", 1, now)).status == 301
    assert django_app.paths == [HEARTBEATS]
    ours = beat(front, secrets["eu-west"], hb_doc("euw-1", 2, now), **https)
    theirs = beat(django_app, secrets["eu-west"], hb_doc("euw-2", 2, now), **https)
    front.close()
    assert django_app.paths == [HEARTBEATS, HEARTBEATS]
    same_reply(ours, theirs)
    assert ours.headers["Strict-Transport-Security"].startswith("max-age=3600")


def test_other_methods_and_paths_pass_through(front: Any, django_app: Recorder) -> None:
    assert call(front, HEARTBEATS, method="GET").status == 401
    assert call(front, "/healthz", method="GET").status == 200
    assert django_app.paths == [HEARTBEATS, "/healthz"]


def test_the_front_can_be_turned_off(django_app: Recorder, secrets: dict[str, str]) -> None:
    from regions.api.fastfront.front import LoopFront

    off = LoopFront(django_app, enabled=False)
    assert beat(off, secrets["eu-west"], hb_doc("euw-1", 1, time.time())).status == 200
    assert django_app.paths == [HEARTBEATS]
    off.close()
