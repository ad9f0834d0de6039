"""With a store unreachable, every path answers in the API's one error format: a JSON 503 with
``Retry-After``, never uvicorn's plain-text 500 or Django's HTML 500.

Probed from outside, as deployed: ``uvicorn trafficmgr.asgi:application`` in a child process,
first with its own ``redis-server`` killed under it, then with ``DATABASE_URL`` pointing at a
closed port. The hot paths (``route``, ``heartbeats``) are answered by the ASGI front, the
rest by Django. A path may also keep working (fail static); it may not break the contract.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.regions.api.live_server import (
    AppServer,
    RedisProcess,
    Reply,
    prepare_database,
    server_env,
)
from tests.regions.loop.conftest import hb_doc
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

DECISION = json.dumps(
    {"model": "llama-3-70b", "client_country": "IE", "input_tokens": 100, "max_output_tokens": 10}
).encode()
COMPLETIONS = json.dumps(
    {
        "completions": [
            {
                "endpoint": "euw-1",
                "model": "llama-3-70b",
                "input_tokens": 10,
                "output_tokens": 10,
                "latency_ms": 100.0,
            }
        ]
    }
).encode()
# A secret shaped like an issued one, which no database could confirm while it is away.
NEVER_SEEN = "tmk_" + "A" * 43
JSON = {"content-type": "application/json"}

# (name, method, path, body, token role): the hot paths through the front and through Django,
# the configuration API, the loop's reads, the schema and the probes.
PROBES = [
    ("decision, front", "POST", "/api/v1/route", DECISION, "viewer"),
    ("decision, Django", "POST", "/api/v1/route?via=django", DECISION, "viewer"),
    ("heartbeat, front", "POST", "/api/v1/heartbeats/", b"heartbeat", "agent"),
    ("heartbeat, Django", "POST", "/api/v1/heartbeats/?via=django", b"heartbeat", "agent"),
    ("completions, front", "POST", "/api/v1/route/completions", COMPLETIONS, "viewer"),
    ("regions", "GET", "/api/v1/regions/", b"", "viewer"),
    ("region write", "PATCH", "/api/v1/regions/eu-west/", b'{"priority": 3}', "admin"),
    ("routing table", "GET", "/api/v1/routing/table", b"", "viewer"),
    ("routing history", "GET", "/api/v1/routing/history", b"", "viewer"),
    ("events", "GET", "/api/v1/events/", b"", "viewer"),
    ("drain", "POST", "/api/v1/regions/us-east/undrain/?dry_run=1", b"", "admin"),
    ("fleet export", "GET", "/api/v1/fleet/export?format=json", b"", "admin"),
    ("schema", "GET", "/api/schema/", b"", ""),
    ("metrics", "GET", "/metrics", b"", ""),
    ("readiness", "GET", "/readyz", b"", ""),
]


def assert_contract(name: str, reply: Reply) -> None:
    """Working, or refused in the one error format; a 5xx only as a JSON 503 with Retry-After."""
    assert reply.status != 500, f"{name}: 500 {reply.headers.get('content-type')} {reply.body!r}"
    if reply.status >= 500:
        assert reply.status == 503, (name, reply.status, reply.body)
        assert reply.headers.get("content-type", "").startswith("application/json"), (
            name,
            reply.headers,
            reply.body[:300],
        )
        doc = reply.json()
        if name == "readiness":  # a probe, not a client to retry: /readyz lists its checks
            return
        assert re.fullmatch(r"[1-9][0-9]*", reply.headers.get("retry-after", "")), (
            name,
            reply.headers,
        )
        assert set(doc) == {"error", "detail", "fields"}, (name, doc)
        assert doc["error"] == "unavailable" and doc["detail"], (name, doc)


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"} if secret else {}


def probe_all(server: AppServer, secrets: dict[str, str]) -> dict[str, Reply]:
    replies = {}
    for seq, (name, method, path, body, role) in enumerate(PROBES, start=1):
        if body == b"heartbeat":
            body = json.dumps(hb_doc("euw-1", seq, time.time())).encode()
        headers = {**JSON, **bearer(secrets.get(role, ""))}
        replies[name] = server.request(method, path, body, headers)
    return replies


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisProcess]:
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server binary to kill (apt-get install redis-server)")
    redis = RedisProcess(tmp_path)
    redis.start()
    yield redis
    redis.kill()


def test_with_redis_killed_every_path_keeps_the_contract(
    tmp_path: Path, redis_server: RedisProcess
) -> None:
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite3'}", redis_server.url)
    secrets = prepare_database(env)
    server = AppServer(env, tmp_path / "uvicorn.log")
    server.start()
    try:
        before = server.request(
            "POST", "/api/v1/route", DECISION, {**JSON, **bearer(secrets["viewer"])}
        )
        assert before.status in (200, 503) and before.json(), before
        redis_server.kill()
        replies = probe_all(server, secrets)
        for name, reply in replies.items():
            assert_contract(name, reply)
        assert replies["readiness"].status == 503
    finally:
        server.stop()


def test_with_the_database_away_every_path_keeps_the_contract(tmp_path: Path) -> None:
    closed = f"postgres://trafficmgr@127.0.0.1:{free_port()}/trafficmgr"
    server = AppServer(server_env(tmp_path, closed), tmp_path / "uvicorn.log")
    server.start()
    try:
        secrets = {"viewer": NEVER_SEEN, "admin": NEVER_SEEN, "agent": "tma_" + "A" * 43}
        replies = probe_all(server, secrets)
        for name, reply in replies.items():
            assert_contract(name, reply)
        # A token nobody can check is neither let in nor called invalid: the service is away.
        for name in ("decision, front", "heartbeat, front", "regions", "region write"):
            assert replies[name].status == 503, (name, replies[name])
        assert server.request("GET", "/healthz").status == 200
    finally:
        server.stop()


def test_with_the_database_away_the_login_page_says_so_without_a_traceback(
    tmp_path: Path,
) -> None:
    closed = f"postgres://trafficmgr@127.0.0.1:{free_port()}/trafficmgr"
    server = AppServer(server_env(tmp_path, closed), tmp_path / "uvicorn.log")
    server.start()
    try:
        page = {"accept": "text/html,application/xhtml+xml"}
        form = server.request("GET", "/login/", headers=page)
        assert form.status == 200, form
        cookie = form.headers["set-cookie"].split(";", 1)[0]
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', form.body)
        assert token is not None
        body = f"csrfmiddlewaretoken={token.group(1).decode()}&username=ops&password=x".encode()
        headers = {
            **page,
            "cookie": cookie,
            "content-type": "application/x-www-form-urlencoded",
            "referer": f"{server.url}/login/",
        }
        reply = server.request("POST", "/login/", body, headers)
        assert reply.status == 503, (reply.status, reply.body[:500])
        assert reply.headers["content-type"].startswith("text/html")
        assert re.fullmatch(r"[1-9][0-9]*", reply.headers.get("retry-after", ""))
        assert b"Traceback" not in reply.body and b"Server Error (500)" not in reply.body
    finally:
        server.stop()
