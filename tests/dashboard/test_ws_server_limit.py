"""The web server itself caps what a page may send: docker-compose.yml's uvicorn command (the one
deployed everywhere, ``tests/e2e/test_web_command.py``) with a signed-in viewer.

uvicorn's default ``--ws-max-size`` is 16 MiB, and any viewer could send that much (a worker
grew from 133 to 524 MB). With the compose command, a message over ``SERVER_MAX_BYTES`` closes
the socket with 1009 before the application sees it; one under it but over the application's
own limit gets the application's error, then 1009; a small bad one an error on a socket that
stays open. The server is self-contained: a temporary SQLite database, no Redis.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from dashboard import inbound
from tests.e2e.test_dashboard_ws import login
from trafficmgr.testing.ports import free_port
from trafficmgr.testing.topology.liveserver import VIEWER, LiveServer
from trafficmgr.testing.topology.processes import ROOT, web_command

PASSWORD = "dashboard-test-password"


@pytest.fixture(scope="module")
def uvicorn_server() -> Iterator[LiveServer]:
    import os

    tmp = Path(tempfile.mkdtemp(prefix="trafficmgr-ws-limit-"))
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env |= {
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "TRAFFICMGR_VAR_DIR": str(tmp / "var"),
        "SECRET_KEY": "ws-limit-test-only-secret-key",
        "TRAFFICMGR_TLS": "0",
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "WARNING",
    }
    port = free_port()
    server = LiveServer(url=f"http://127.0.0.1:{port}", tmp=tmp, env=env)
    with (tmp / "uvicorn.log").open("wb") as out:
        try:
            server.prepare()
            server.proc = subprocess.Popen(
                web_command(port, 1), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
            wait_listening(server)
            yield server
        finally:
            server.stop()
            shutil.rmtree(tmp, ignore_errors=True)


def wait_listening(server: LiveServer, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.proc is not None and server.proc.poll() is None, "uvicorn exited"
        try:
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise AssertionError(f"uvicorn did not answer within {timeout:g} s")


async def opened(server: LiveServer, cookie: str) -> Any:
    ws = await connect(
        server.url.replace("http://", "ws://") + "/ws/dashboard/",
        origin=Origin(server.url),
        additional_headers={"Cookie": cookie},
        max_size=None,
    )
    assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "snapshot"
    return ws


async def until_closed(ws: Any) -> tuple[list[str], int | None]:
    """What the server sent until it closed the socket, and its close code."""
    got: list[str] = []
    try:
        while True:
            got.append(json.loads(await asyncio.wait_for(ws.recv(), 10))["type"])
    except ConnectionClosed as exc:
        return got, None if exc.rcvd is None else int(exc.rcvd.code)


def test_the_deployed_web_command_caps_and_checks_what_a_page_sends(
    uvicorn_server: LiveServer,
) -> None:
    cookie = login(uvicorn_server.url, VIEWER, PASSWORD)

    async def scenario() -> None:
        huge = await opened(uvicorn_server, cookie)
        await huge.send("x" * (inbound.SERVER_MAX_BYTES + 1))
        # Closed by the server itself: the application never saw it, so it said nothing.
        assert await until_closed(huge) == ([], inbound.CLOSE_TOO_BIG)

        big = await opened(uvicorn_server, cookie)
        await big.send("x" * (inbound.MAX_MESSAGE_BYTES + 1))
        error = json.loads(await asyncio.wait_for(big.recv(), 10))
        assert error["type"] == "error" and error["error"] == "too_large"
        assert (await until_closed(big))[1] == inbound.CLOSE_TOO_BIG

        small = await opened(uvicorn_server, cookie)
        await small.send(b"\x00binary")
        assert json.loads(await asyncio.wait_for(small.recv(), 10))["error"] == "binary_frame"
        await small.send(json.dumps({"type": "ping", "id": "still-open"}))
        assert json.loads(await asyncio.wait_for(small.recv(), 10))["id"] == "still-open"
        await small.close()

    asyncio.run(scenario())
