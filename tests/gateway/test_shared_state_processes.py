"""Several real gateway processes against one Redis decide as one (the shared request-path state).

Each process is ``python -m trafficmgr.gateway --shared-state URL`` over the simulated world;
the figures come from their ``/healthz`` detail and their answers' headers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.gateway.world import world_fleet
from trafficmgr.contracts import PREFIX
from trafficmgr.fleetfile import dump_fleet
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs
from trafficmgr.simserver.layout import with_addresses
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "shared-secret"
HISTORY = "the system prompt and the conversation so far, turn after turn. " * 120


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    specs = fleet_specs(world_fleet(), base_port=0)
    with SimServerThread(specs, time_scale=5.0, options=ServeOptions(seed=3)) as sim:
        path = tmp_path_factory.mktemp("shared") / "fleet.yaml"
        path.write_text(dump_fleet(with_addresses(world_fleet(), sim.servers.addresses())))
        yield path


@pytest.fixture
def shared_url(redis_url: str) -> str:
    """A Redis database of its own, emptied of the shared keys a previous run left."""
    url = redis_url.rsplit("/", 1)[0] + "/14" if redis_url.count("/") > 2 else redis_url + "/14"
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{PREFIX}:rp:*"):
        client.delete(key)
    return url


@pytest.fixture
def start(fleet_file: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], int]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def launch(*flags: str) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(fleet_file),
             "--listen", f"127.0.0.1:{port}", "--token", TOKEN, *flags],
            cwd=ROOT,
        )  # fmt: skip
        procs.append(proc)
        deadline = time.monotonic() + 30
        while True:
            try:
                health(port)
                return proc, port
            except OSError:
                assert proc.poll() is None, "the gateway exited"
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.1)

    yield launch
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def post(port: int, prompt: str, max_tokens: int = 4, stream: bool = False) -> HTTPResponse:
    body = {"model": "m1", "prompt": prompt, "max_tokens": max_tokens, "stream": stream}
    if stream:  # exactly ``max_tokens``: a long stream stays in flight while it is held
        body["ignore_eos"] = True
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    response: HTTPResponse = urllib.request.urlopen(req, timeout=60)
    return response


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def peers_in_flight(port: int) -> int:
    return int(health(port)["shared_state"]["peer_in_flight"])


def test_turns_sent_to_different_processes_land_where_the_prefix_is(
    start: Callable[..., tuple[Any, int]], shared_url: str
) -> None:
    _, a = start("--shared-state", shared_url)
    _, b = start("--shared-state", shared_url)
    wait_for(lambda: health(b)["shared_state"]["peers"] == 1, "B never merged A")
    for turn in range(5):
        first = post(a, f"conversation {turn}: {HISTORY}")
        first.read()
        time.sleep(0.1)  # a few publish cycles
        second = post(b, f"conversation {turn}: {HISTORY} and the next question")
        second.read()
        assert second.headers["x-trafficmgr-endpoint"] == first.headers["x-trafficmgr-endpoint"]
        assert " cached" in second.headers["x-trafficmgr-reason"]  # B knew A's blocks


def test_work_in_flight_on_one_process_is_seen_by_the_other_and_reconciles_to_zero(
    start: Callable[..., tuple[Any, int]], shared_url: str
) -> None:
    _, a = start("--shared-state", shared_url)
    _, b = start("--shared-state", shared_url)
    with ExitStack() as streams:
        for k in range(6):
            streams.enter_context(post(a, f"long {k}", max_tokens=100_000, stream=True))
        wait_for(lambda: peers_in_flight(b) == 6, "B does not see A's six requests")
    # the streams are closed: A's requests end, and so does B's count of them
    wait_for(lambda: peers_in_flight(b) == 0, "B still counts A's finished requests")
    assert health(a)["in_flight"] == health(b)["in_flight"] == 0


def test_a_killed_process_work_expires_with_its_lease(
    start: Callable[..., tuple[Any, int]], shared_url: str
) -> None:
    doomed, a = start("--shared-state", shared_url)
    _, b = start("--shared-state", shared_url)
    with ExitStack() as streams:
        for k in range(4):
            streams.enter_context(post(a, f"long {k}", max_tokens=100_000, stream=True))
        wait_for(lambda: peers_in_flight(b) == 4, "B does not see A's requests")
        doomed.kill()  # no withdrawal: its part stays until its lease runs out
        doomed.wait(10)
        wait_for(lambda: peers_in_flight(b) == 0, "A's work outlived its lease", 10.0)
    state = health(b)["shared_state"]
    assert state["peers"] == 0
    assert state["ignored"].get("lease_expired", 0) + state["ignored"].get("stale", 0) >= 1


def test_without_redis_a_process_decides_alone_and_says_so(
    start: Callable[..., tuple[Any, int]],
) -> None:
    _, port = start("--shared-state", "redis://127.0.0.1:1/0")
    for k in range(3):
        with post(port, f"alone {k}") as r:
            assert r.status == 200
    state = health(port)["shared_state"]
    assert state["enabled"] and not state["connected"] and state["mode"] == "local"
    assert state["local_decisions"] >= 3 and sum(state["errors"].values()) >= 1
