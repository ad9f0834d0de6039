"""The dashboard's WebSocket against the real ASGI app: who may connect, what it gets.

Transactional tests: the consumer's database calls close the connection around them
(channels' ``database_sync_to_async``), which would end a test's wrapping transaction.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from trafficmgr.asgi import application
from trafficmgr.routing.types import GpuSample, Heartbeat, ServerSample

PATH = "/ws/dashboard/"
pytestmark = pytest.mark.django_db(transaction=True)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async_to_sync(scenario)()


async def until(comm: WebsocketCommunicator, kind: str, timeout: float = 3.0) -> dict[str, Any]:
    """Read messages until one of type ``kind`` arrives (others are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {kind} message within {timeout} s")
        message: dict[str, Any] = await comm.receive_json_from(timeout=left)
        if message["type"] == kind:
            return message


async def connected(headers: list[tuple[bytes, bytes]]) -> tuple[WebsocketCommunicator, Any]:
    comm = WebsocketCommunicator(application, PATH, headers=headers)
    ok, _ = await comm.connect()
    assert ok
    return comm, await comm.receive_json_from(timeout=5)


def heartbeat(endpoint: str, now: float, util: float = 62.0) -> Heartbeat:
    gpus = tuple(
        GpuSample(i, f"GPU-{endpoint}-{i}", "H100", util, 40_000, 80_000) for i in range(2)
    )
    server = ServerSample("sim", 12, 3, 0.41, 5200.0, 180.0, 900.0, ("llama-3-70b", "llama-3-8b"))
    return Heartbeat(endpoint, seq=int(now), sent_at=now, received_at=now, gpus=gpus, server=server)


def test_refused_without_a_session(db: None, ws_headers: Any) -> None:
    async def scenario() -> None:
        comm = WebsocketCommunicator(application, PATH, headers=ws_headers(None))
        ok, _ = await comm.connect()
        assert ok  # accepted only so that the browser sees the close code
        assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}

    run(scenario)


def test_refused_to_a_user_without_a_role(make_user: Any, ws_headers: Any) -> None:
    headers = ws_headers(make_user(None))

    async def scenario() -> None:
        comm = WebsocketCommunicator(application, PATH, headers=headers)
        await comm.connect()
        assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}

    run(scenario)


def test_refused_from_a_foreign_origin(make_user: Any, session_cookie: Any) -> None:
    user = make_user("viewer")
    headers = [(b"origin", b"http://evil.example"), (b"cookie", session_cookie(user))]

    async def scenario() -> None:
        comm = WebsocketCommunicator(application, PATH, headers=headers)
        ok, _ = await comm.connect()
        assert not ok

    run(scenario)


def test_snapshot_on_connect_is_the_rest_apis_json(
    world: Any, make_user: Any, ws_headers: Any, viewer_client: Any
) -> None:
    headers = ws_headers(make_user("viewer"))
    holder: dict[str, Any] = {}

    async def scenario() -> None:
        comm, holder["snapshot"] = await connected(headers)
        await comm.disconnect()

    run(scenario)
    snap = holder["snapshot"]
    assert snap["type"] == "snapshot"
    assert snap["user"] == {
        "username": "viewer-user",
        "role": "viewer",
        "can_act": False,
        "can_configure": False,
    }
    assert snap["table"] == viewer_client.get("/api/v1/routing/table").json()
    assert snap["regions"] == viewer_client.get("/api/v1/regions/").json()["results"]
    assert snap["endpoints"] == viewer_client.get("/api/v1/endpoints/").json()["results"]
    assert snap["events"] == viewer_client.get("/api/v1/events/").json()["results"]
    assert {r["name"] for r in snap["regions"]} == {"eu-west", "us-east", "ap-south"}
    assert snap["residency"][0]["covered_countries"] == ["IN"]
    assert snap["live"]["at"] is None  # no tick yet
    assert set(snap["zones"]) >= {"IE", "US", "IN", "EU"}


def test_an_operators_snapshot_offers_actions(world: Any, make_user: Any, ws_headers: Any) -> None:
    headers = ws_headers(make_user("operator"))
    holder: dict[str, Any] = {}

    async def scenario() -> None:
        comm, holder["snapshot"] = await connected(headers)
        await comm.disconnect()

    run(scenario)
    assert holder["snapshot"]["user"]["can_act"] is True
    assert holder["snapshot"]["user"]["can_configure"] is False


def test_group_messages_reach_every_dashboard(world: Any, make_user: Any, ws_headers: Any) -> None:
    viewer, operator = ws_headers(make_user("viewer")), ws_headers(make_user("operator"))
    message = {
        "type": "table.update",
        "version": "abc",
        "table": {"zones": {}},
        "diff": {},
        "transitions": [],
    }

    async def scenario() -> None:
        first, _ = await connected(viewer)
        second, _ = await connected(operator)
        await get_channel_layer().group_send("dashboard", message)
        assert await first.receive_json_from(timeout=2) == message
        assert await second.receive_json_from(timeout=2) == message
        await first.disconnect()
        await second.disconnect()

    run(scenario)


def test_a_control_loop_tick_reaches_the_page(
    world: Any, make_user: Any, ws_headers: Any, _in_process: Any
) -> None:
    from regions.loop import control
    from regions.models import Event

    headers = ws_headers(make_user("viewer"))
    now = time.time()
    for name in ("euw-1", "euw-2", "aps-1"):
        _in_process.put_heartbeat(heartbeat(name, now), bucket=0)

    async def scenario() -> None:
        comm, _ = await connected(headers)
        result = await database_sync_to_async(control.run_tick)(now)
        update = await until(comm, "table.update")
        assert update["version"] == result.version == update["table"]["version"]
        assert update["table"]["regions"]["eu-west"]["state"] == "healthy"
        live = await until(comm, "live.update")
        assert live["at"] == now
        assert live["regions"]["eu-west"]["state"] == "healthy"
        euw1 = live["endpoints"]["euw-1"]
        assert euw1["healthy"] is True
        assert euw1["gpu_util_pct"] == 62.0
        assert (euw1["waiting"], euw1["ttft_p99_ms"], euw1["mem_total_mb"]) == (3, 900.0, 160_000)
        event = await database_sync_to_async(Event.objects.create)(
            at=world_now(), kind="drill", region="eu-west", message="drill started"
        )
        for name in ("euw-1", "euw-2", "aps-1"):
            _in_process.put_heartbeat(heartbeat(name, now + 1), bucket=0)
        await database_sync_to_async(control.run_tick)(now + 1)
        seen: set[int] = set()
        while event.id not in seen:  # the first tick's transitions come first
            seen.update(e["id"] for e in (await until(comm, "events.new"))["events"])
        await comm.disconnect()

    run(scenario)


def world_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def test_the_live_feed_runs_only_while_dashboards_are_connected(
    world: Any, make_user: Any, ws_headers: Any
) -> None:
    from dashboard.livefeed import feed

    headers = ws_headers(make_user("viewer"))

    async def scenario() -> None:
        a, _ = await connected(headers)
        b, _ = await connected(headers)
        assert feed.running and feed.clients == 2
        await a.disconnect()
        assert feed.running and feed.clients == 1
        await b.disconnect()
        assert not feed.running and feed.clients == 0

    run(scenario)


def test_an_operators_drain_reaches_the_page(
    world: Any, make_user: Any, ws_headers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.test import Client

    monkeypatch.setattr("regions.loop.actions._tick_soon", lambda: None)  # no Celery task
    operator = make_user("operator")
    http = Client()
    http.force_login(operator)
    headers = ws_headers(operator)

    async def scenario() -> None:
        comm, _ = await connected(headers)
        response = await database_sync_to_async(http.post)("/api/v1/endpoints/euw-2/drain")
        assert response.status_code == 200, response.content
        update = await until(comm, "config.update")
        states = {e["name"]: e["admin_state"] for e in update["endpoints"]}
        assert states == {
            "euw-1": "active",
            "euw-2": "drained",
            "use-1": "active",
            "use-2": "active",
            "aps-1": "active",
        }
        await comm.disconnect()

    run(scenario)
