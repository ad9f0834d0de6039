"""Every body parser is bounded, and what it refuses is a 400 in the one error format.

JSON: nesting depth, integers a float field cannot take, ``1e999``, control characters (in
values and keys), on the configuration API and in the JSON form of ``fleet/apply``.
Multipart: an empty form sent to the operations that take a JSON object, under daphne (the
demo's server, whose Twisted answered a bare 400 before the application saw the body) and
under uvicorn. The fleet file's own bounds are in tests/regions/fleet/test_fleet_hostile_input.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.regions.api.api_calls import API, NEW_REGION, assert_error, send_raw
from tests.regions.api.live_server import AppServer, prepare_database, server_env

pytestmark = pytest.mark.django_db

DEEP = "[" * 10_000 + "]" * 10_000
REGION = json.dumps(NEW_REGION)


def with_field(name: str, literal: str) -> bytes:
    """NEW_REGION with one field's JSON text replaced by ``literal`` (no re-encoding)."""
    doc = dict(NEW_REGION)
    doc[name] = "@@"
    return json.dumps(doc).replace('"@@"', literal).encode()


# name: (method, path, body, the field the error names)
HOSTILE_JSON = {
    "10,000 nested arrays": ("POST", "regions/", DEEP.encode(), None),
    "40 nested arrays in a field": (
        "POST",
        "regions/",
        with_field("name", "[" * 40 + "]" * 40),
        "name",
    ),
    "a 400-digit latitude": ("POST", "regions/", with_field("lat", "1" + "0" * 400), "lat"),
    "a 40-digit priority": ("POST", "regions/", with_field("priority", "9" * 40), "priority"),
    "1e999 as latitude": ("POST", "regions/", with_field("lat", "1e999"), "lat"),
    "an escape sequence in a token name": (
        "POST",
        "tokens/",
        b'{"name": "ci\\u001b[2J", "role": "viewer"}',
        "name",
    ),
    "a NUL in a key": ("POST", "tokens/", b'{"name": "ci", "role": "viewer", "x\\u0000": 1}', None),
    "a lone surrogate": ("POST", "tokens/", b'{"name": "ci\\ud800", "role": "viewer"}', "name"),
    "DEL in a country": ("POST", "regions/", with_field("country", '"D\\u007f"'), "country"),
    "fleet/apply, 10,000 nested arrays": ("POST", "fleet/apply?dry_run=1", DEEP.encode(), None),
    "fleet/apply, nested beside the fleet": (
        "POST",
        "fleet/apply?dry_run=1",
        b'{"fleet": "zone: x", "more": ' + ("[" * 100 + "]" * 100).encode() + b"}",
        None,
    ),
}


@pytest.mark.parametrize(
    ("method", "path", "body", "field"), HOSTILE_JSON.values(), ids=list(HOSTILE_JSON)
)
def test_hostile_json_is_a_400_in_the_error_format(
    world: Any,
    admin_client: Any,
    unchanged: Any,
    method: str,
    path: str,
    body: bytes,
    field: str | None,
) -> None:
    with unchanged():
        response = send_raw(admin_client, method, f"{API}/{path}", body)
    assert_error(response, 400, *([field] if field else []))


def test_a_deep_but_allowed_body_still_works(world: Any, admin_client: Any) -> None:
    """The bounds leave room: newlines and tabs in strings, 30-digit integers (for the
    field's own range to judge), 30 levels of nesting (for the serializer to judge)."""
    body = json.dumps({"name": "line one\nline\ttwo", "role": "viewer"}).encode()
    assert send_raw(admin_client, "POST", f"{API}/tokens/", body).status_code == 201
    for name, literal in (("priority", "9" * 30), ("name", "[" * 30 + "]" * 30)):
        response = send_raw(admin_client, "POST", f"{API}/regions/", with_field(name, literal))
        doc = assert_error(response, 400, name)
        assert "deeply" not in doc["fields"][name][0] and "bits" not in doc["fields"][name][0]


# The operations whose schema offered multipart/form-data: they read a JSON object.
JSON_OBJECT_POSTS = [
    ("/api/v1/drills/", "operator"),
    ("/api/v1/endpoints/euw-1/drain/", "operator"),
    ("/api/v1/endpoints/euw-1/undrain/", "operator"),
    ("/api/v1/heartbeats/", "agent"),
    ("/api/v1/regions/eu-west/drain/", "operator"),
    ("/api/v1/regions/eu-west/pause-failover/", "operator"),
    ("/api/v1/regions/eu-west/resume-failover/", "operator"),
    ("/api/v1/regions/eu-west/undrain/", "operator"),
    ("/api/v1/regions/eu-west/weight/", "operator"),
    ("/api/v1/route", "viewer"),
    ("/api/v1/route/completions", "viewer"),
]
BOUNDARY = "c637e12e2b1a998d80d1b087531af51c"
EMPTY_FORM = f"--{BOUNDARY}--\r\n".encode()


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def live(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp(request.param)
    env = server_env(tmp, f"sqlite:///{tmp / 'db.sqlite3'}")
    secrets = prepare_database(env)
    secrets["operator"] = secrets["admin"]
    server = AppServer(env, Path(tmp) / "server.log", kind=request.param)
    server.start()
    yield server, secrets
    server.stop()


@pytest.mark.integration
@pytest.mark.parametrize(("path", "role"), JSON_OBJECT_POSTS, ids=[p for p, _ in JSON_OBJECT_POSTS])
def test_an_empty_multipart_form_is_answered_in_the_error_format(
    live: Any, path: str, role: str
) -> None:
    server, secrets = live
    reply = server.request(
        "POST",
        path + "?dry_run=1" if "drain" in path or "failover" in path else path,
        EMPTY_FORM,
        {
            "authorization": f"Bearer {secrets[role]}",
            "content-type": f"multipart/form-data; boundary={BOUNDARY}",
        },
    )
    assert reply.headers.get("content-type") == "application/json", (reply.status, reply.headers)
    doc = reply.json()
    if path.endswith(("/drain/", "/undrain/", "-failover/")):
        assert reply.status == 200, doc  # these take no body: what is sent is ignored
    else:
        assert 400 <= reply.status < 500 and set(doc) == {"error", "detail", "fields"}, doc
