"""Dashboards on every uvicorn worker get the tables the celery worker publishes.

The cluster (``trafficmgr.testing.topology.cluster``) serves the web app as docker-compose.yml does,
``uvicorn ... --workers 2``: two processes, each with its own dashboard live feed
(dashboard/livefeed.py) subscribed to the ``dashboard`` group of the Redis channel layer. A viewer
signs in through the login form and opens dashboards until both workers serve some (which process
holds the server end of each socket is read from /proc); every one gets its snapshot. An operator
drains ``eu-central`` through the REST API; the celery worker's tick publishes the new table to the
group; every dashboard, on both workers, must get that same ``table.update`` with the region
drained, and a later one once it is undrained.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import json
import re
import secrets
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from trafficmgr.testing.topology.cluster import WEB_WORKERS, Cluster
from trafficmgr.testing.topology.observe import Api, socket_owners
from trafficmgr.testing.topology.processes import wait_until

pytestmark = pytest.mark.integration

REGION = "eu-central"  # priority 2: draining it moves little traffic (no safety valve)
VIEWER = "e2e-viewer"
BATCH = 4  # dashboards opened at once
MIN_DASHBOARDS, MAX_DASHBOARDS = 8, 32  # more while not every worker serves some
WAIT_S = 10.0  # for each thing awaited: generous, the machine's 2 cores are shared

Message = dict[str, Any]


def create_viewer(cluster: Cluster) -> str:
    """A dashboard user with the viewer role; return its password."""
    password = secrets.token_urlsafe(16)
    code = (
        "import os; from django.contrib.auth.models import Group, User; "
        f"user = User.objects.create_user({VIEWER!r}, password=os.environ['E2E_PASSWORD']); "
        "user.groups.add(Group.objects.get_or_create(name='viewer')[0])"
    )
    proc = cluster.spawn(
        "viewer", [sys.executable, "manage.py", "shell", "-c", code], {"E2E_PASSWORD": password}
    )
    assert cluster.finish(proc, 60) == 0, f"creating the viewer failed:\n{proc.tail()}"
    return password


def login(url: str, username: str, password: str) -> str:
    """Sign in through the login form as a browser does; return the session cookie."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{url}/login/", timeout=WAIT_S).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    form = {"username": username, "password": password, "csrfmiddlewaretoken": token[1]}
    opener.open(
        urllib.request.Request(
            f"{url}/login/",
            data=urllib.parse.urlencode({**form, "next": "/"}).encode(),
            headers={"Referer": f"{url}/login/"},
        ),
        timeout=WAIT_S,
    )
    session = next((c.value for c in jar if c.name == "sessionid"), None)
    assert session, f"signing in as {username} gave no session cookie"
    return f"sessionid={session}"


@dataclass
class Dashboard:
    """One dashboard's WebSocket, and the worker process serving it."""

    ws: ClientConnection
    port: int  # the client end's port
    pid: int = 0
    seen: Counter[str] = field(default_factory=Counter)  # message types read so far

    def __str__(self) -> str:
        return f"dashboard :{self.port} on worker {self.pid or '?'} (read {dict(self.seen)})"

    async def until(self, wanted: Callable[[Message], bool], what: str) -> Message:
        """Read messages until one is ``wanted``; fail naming ``what`` after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        try:
            while (left := deadline - time.monotonic()) > 0:
                message: Message = json.loads(await asyncio.wait_for(self.ws.recv(), left))
                self.seen[message.get("type", "?")] += 1
                if wanted(message):
                    return message
        except TimeoutError:
            pass
        except ConnectionClosed as exc:
            raise AssertionError(f"{self} was closed ({exc}) waiting for {what}") from None
        raise AssertionError(f"{self}: no {what} within {WAIT_S:g} s")


async def open_dashboard(cluster: Cluster, cookie: str) -> Dashboard:
    ws = await connect(
        cluster.url.replace("http://", "ws://") + "/ws/dashboard/",
        origin=Origin(cluster.url),
        additional_headers={"Cookie": cookie},
        max_size=None,
        open_timeout=WAIT_S,
    )
    dashboard = Dashboard(ws, int(ws.local_address[1]))
    snapshot = await dashboard.until(lambda m: True, "first message")
    assert snapshot["type"] == "snapshot", f"{dashboard}: first message {snapshot['type']}"
    assert REGION in {r["name"] for r in snapshot["regions"]}, f"{REGION} not in the snapshot"
    return dashboard


async def open_on_every_worker(cluster: Cluster, cookie: str, dashboards: list[Dashboard]) -> None:
    """Open dashboards, BATCH at a time, until there are enough and every worker serves some."""
    workers = cluster.web_workers()
    assert len(workers) == WEB_WORKERS, f"uvicorn workers alive: {workers}"
    while len(dashboards) < MAX_DASHBOARDS:
        dashboards += await asyncio.gather(*(open_dashboard(cluster, cookie) for _ in range(BATCH)))
        owners = socket_owners(workers, cluster.http_port)
        for dashboard in dashboards:
            dashboard.pid = owners.get(dashboard.port, 0)
        if len(dashboards) >= MIN_DASHBOARDS and {d.pid for d in dashboards} >= set(workers):
            break
    unowned = [str(d) for d in dashboards if d.pid not in workers]
    assert not unowned, f"no worker of {workers} holds these sockets: {unowned}"
    served = Counter(d.pid for d in dashboards)
    assert set(served) == set(workers), (
        f"{len(dashboards)} dashboards all landed on worker(s) {dict(served)}, not on each of "
        f"{workers}: the test cannot show that every worker gets the updates"
    )


def region_state(message: Message) -> str | None:
    if message.get("type") != "table.update":
        return None
    return str(message["table"]["regions"].get(REGION, {}).get("state"))


async def everyone_gets(
    dashboards: list[Dashboard], state: Callable[[str | None], bool], what: str
) -> list[Message]:
    """The first ``table.update`` each dashboard reads whose REGION state passes ``state``."""
    got = await asyncio.gather(
        *(
            d.until(lambda m: region_state(m) is not None and state(region_state(m)), what)
            for d in dashboards
        ),
        return_exceptions=True,
    )
    failures = [str(g) for g in got if isinstance(g, BaseException)]
    assert not failures, f"{len(failures)} of {len(dashboards)} dashboards:\n" + "\n".join(failures)
    return [g for g in got if isinstance(g, dict)]


async def drain_round(api: Api, dashboards: list[Dashboard]) -> None:
    """Drain REGION, see every dashboard get it in the same table, undrain it, see that too."""
    drained = False
    try:
        assert api.table()["regions"][REGION]["state"] != "drained", f"{REGION} drained already"
        asked = time.monotonic()
        reply = api.call("POST", f"regions/{REGION}/drain")
        drained = True
        assert reply["applied"], f"the drain was not applied: {reply}"
        got = await everyone_gets(
            dashboards, lambda s: s == "drained", f"table.update with {REGION} drained"
        )
        print(
            f"{REGION} drained: on every dashboard {time.monotonic() - asked:.2f} s after the call"
        )
        versions = Counter(m["version"] for m in got)
        assert len(versions) == 1, (
            f"the dashboards saw {REGION} drained first in different tables: {versions}"
        )
        # The API's worker rereads the published table's version at most every 0.2 s
        # (regions.hotstate.redis_store.VERSION_CHECK_S): it may lag the push by that much.
        await asyncio.to_thread(
            wait_until,
            lambda: api.table()["regions"][REGION]["state"] == "drained",
            WAIT_S,
            f"GET /api/v1/routing/table to show {REGION} drained",
        )
        reply = api.call("POST", f"regions/{REGION}/undrain")
        drained = not reply["applied"]
        assert not drained, f"the undrain was not applied: {reply}"
        await everyone_gets(
            dashboards, lambda s: s != "drained", f"table.update with {REGION} back"
        )
    finally:
        if drained:
            api.call("POST", f"regions/{REGION}/undrain")


async def on_every_worker(
    cluster: Cluster, cookie: str, scenario: Callable[[Api, list[Dashboard]], Awaitable[None]]
) -> None:
    """Run ``scenario`` with dashboards open on every worker; close them afterwards."""
    dashboards: list[Dashboard] = []
    try:
        await open_on_every_worker(cluster, cookie, dashboards)
        per_worker = dict(Counter(d.pid for d in dashboards))
        print(f"\n{len(dashboards)} dashboards, per worker: {per_worker}")
        await scenario(Api(cluster.url, cluster.tokens["admin"]), dashboards)
    finally:
        await asyncio.gather(*(d.ws.close() for d in dashboards), return_exceptions=True)


@pytest.fixture(scope="module")
def cookie(cluster: Cluster) -> str:
    """A viewer's session, signed in through the login form."""
    return login(cluster.url, VIEWER, create_viewer(cluster))


def run(cluster: Cluster, cookie: str, scenario: Any, budget_s: float) -> None:
    cluster.wait_settled()
    try:
        asyncio.run(asyncio.wait_for(on_every_worker(cluster, cookie, scenario), budget_s))
    finally:
        with contextlib.suppress(AssertionError):  # the test's own failure says more
            cluster.wait_settled()  # leave the cluster as the other tests expect it


def test_dashboards_on_every_uvicorn_worker_get_the_table_the_celery_worker_publishes(
    cluster: Cluster, cookie: str
) -> None:
    run(cluster, cookie, drain_round, 6 * WAIT_S + 60)
