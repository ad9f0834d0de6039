"""The EPP killed (SIGKILL) or hung (SIGSTOP) under a real Envoy: fail closed, then recover.

Envoy runs the bootstrap's default ``failure_mode_allow: false``: without the EPP's answer a
request gets a 5xx within the message timeout, and is never sent to an endpoint by Envoy's
own fallback policy. The EPP is a process of its own (``python -m trafficmgr.epp``, the
project's request-path core, ``--region eu-west``), so a signal stops it as it would stop a
deployed one; u3 sits in us-east, in Envoy's cluster but outside the core's region, so any
request Envoy routed around the EPP could land there, and none may.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.epp.harness import ROOT, EnvoyProcess, LoopThread, fleet_yaml
from tests.epp.upstream import Upstream
from trafficmgr.epp.envoy_config import EnvoyOptions, render
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.testing.ports import free_port

pytestmark = pytest.mark.integration

TOKEN = "outage-token"
MESSAGE_TIMEOUT_S = 1.0
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
# how http.client reports a connection refused, reset, or a chunked body cut short
BROKEN = (OSError, http.client.HTTPException, ValueError)


@dataclass
class Outage:
    loop: LoopThread
    upstreams: list[Upstream]
    fleet_file: Path
    epp_address: str
    envoy: EnvoyProcess
    port: int
    log: Path
    epp: subprocess.Popen[bytes] | None = None

    def start_epp(self) -> None:
        cmd = [sys.executable, "-m", "trafficmgr.epp", "--fleet", str(self.fleet_file),
               "--listen", self.epp_address, "--token", TOKEN, "--region", "eu-west"]  # fmt: skip
        with self.log.open("ab") as out:
            self.epp = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def signal_epp(self, signum: int) -> None:
        assert self.epp is not None
        os.kill(self.epp.pid, signum)

    def stop_epp(self) -> None:
        if self.epp is not None and self.epp.poll() is None:
            os.kill(self.epp.pid, signal.SIGCONT)
            self.epp.kill()
            self.epp.wait(10)

    def served(self, name: str) -> int:
        return next(u.served for u in self.upstreams if u.name == name)


@pytest.fixture(scope="module")
def outage(envoy_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    workdir = tmp_path_factory.mktemp("outage")
    loop = LoopThread()
    upstreams = [Upstream(f"u{i}", free_port()) for i in range(4)]
    for upstream in upstreams:
        loop.run(upstream.start())
    regions = {
        "eu-west": [(u.name, u.address, ["m1"]) for u in upstreams[:3]],
        "us-east": [(u.name, u.address, ["m1"]) for u in upstreams[3:]],
    }
    text = fleet_yaml(regions)
    fleet_file = workdir / "fleet.yaml"
    fleet_file.write_text(text)
    port, admin = free_port(), free_port()
    options = EnvoyOptions(
        listen=f"127.0.0.1:{port}",
        epp=f"127.0.0.1:{free_port()}",
        admin=f"127.0.0.1:{admin}",
        message_timeout_s=MESSAGE_TIMEOUT_S,
    )
    config = workdir / "envoy.yaml"
    config.write_text(render(load_fleet_text(text), options))
    envoy = EnvoyProcess(envoy_path, config, admin, workdir / "envoy.log")
    bench = Outage(loop, upstreams, fleet_file, options.epp, envoy, port, workdir / "epp.log")
    try:
        envoy.wait_ready()
        bench.start_epp()
        assert wait_flowing(bench, 30.0), bench.log.read_text()[-2000:]
        yield bench
    finally:
        bench.stop_epp()
        envoy.stop()
        for upstream in upstreams:
            loop.run(upstream.stop())
        loop.stop()


@pytest.fixture
def epp_up(outage: Outage) -> Outage:
    """The bench with a running, answering EPP (a test before may have stopped it)."""
    if outage.epp is None or outage.epp.poll() is not None:
        outage.start_epp()
    else:
        outage.signal_epp(signal.SIGCONT)
    assert wait_flowing(outage, 30.0), outage.log.read_text()[-2000:]
    return outage


def chat(port: int, timeout: float = 10.0) -> tuple[int, float, str]:
    """POST one chat completion; return (status, seconds, upstream that answered or "")."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        connection.request("POST", "/v1/chat/completions", json.dumps(CHAT), headers)
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started, response.getheader("x-upstream", "")
    finally:
        connection.close()


def wait_flowing(bench: Outage, timeout: float) -> bool:
    """Wait until three requests in a row are answered by an endpoint."""
    deadline = time.monotonic() + timeout
    streak = 0
    while time.monotonic() < deadline and streak < 3:
        try:
            streak = streak + 1 if chat(bench.port, 5.0)[0] == 200 else 0
        except BROKEN:
            streak = 0
        if streak == 0:
            time.sleep(0.1)
    return streak >= 3


@dataclass
class Traffic:
    """Requests sent one after another from a thread until told to stop (bounded)."""

    port: int
    replies: list[tuple[float, int, float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        deadline = time.monotonic() + 30.0
        while not self._stop.is_set() and time.monotonic() < deadline:
            at = time.monotonic()
            try:
                self.replies.append((at, *chat(self.port)))
            except BROKEN:  # a response cut mid-body (the kill) is one too
                self.replies.append((at, 0, time.monotonic() - at, ""))

    def __enter__(self) -> Traffic:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def between(self, start: float, end: float) -> list[tuple[float, int, float, str]]:
        return [r for r in self.replies if start <= r[0] < end]


def streamed_in_flight(port: int, result: list[object]) -> None:
    """A slow streamed request; appends how it ended: ("done", text) or ("broken", seconds)."""
    started = time.monotonic()
    body = {**CHAT, "max_tokens": 40, "stream": True}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        connection.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        response = connection.getresponse()
        text = response.read().decode()
        result.append(
            ("done", text) if "[DONE]" in text else ("broken", time.monotonic() - started)
        )
    except BROKEN:
        result.append(("broken", time.monotonic() - started))
    finally:
        connection.close()


def test_killed_epp_answers_5xx_never_routes_around_and_recovers(epp_up: Outage) -> None:
    bench = epp_up
    for upstream in bench.upstreams:
        upstream.token_delay_s = 0.1
    stream: list[object] = []
    streamer = threading.Thread(target=streamed_in_flight, args=(bench.port, stream))
    try:
        with Traffic(bench.port) as traffic:
            streamer.start()
            time.sleep(0.8)
            killed = time.monotonic()
            bench.signal_epp(signal.SIGKILL)
            bench.epp.wait(5)  # type: ignore[union-attr]
            time.sleep(1.5)
            restarted = time.monotonic()
            bench.start_epp()
            assert wait_flowing(bench, 30.0)
            flowing = time.monotonic()
            time.sleep(0.5)
        streamer.join(20)
    finally:
        for upstream in bench.upstreams:
            upstream.token_delay_s = 0.0
    before = [r for r in traffic.replies if r[0] + r[2] < killed]  # answered before the kill
    down = traffic.between(killed + 0.05, restarted)
    assert before and all(status == 200 for _, status, _, _ in before)
    assert down, "requests were sent while the EPP was down"
    assert {status for _, status, _, _ in down} == {500}, down  # at once: no EPP to ask
    assert max(seconds for _, _, seconds, _ in down) < MESSAGE_TIMEOUT_S + 1.0
    assert [r for r in traffic.between(flowing, time.monotonic()) if r[1] == 200]
    assert bench.served("u3") == 0, "a request was routed around the EPP"
    # the stream that was mid-answer is cut, not finished by a fallback nor left hanging
    assert stream and stream[0][0] == "broken", stream  # type: ignore[index]


def test_hung_epp_times_out_into_5xx_and_recovers(epp_up: Outage) -> None:
    bench = epp_up
    timeouts_before = bench.envoy.stats().get("http.inference.ext_proc.message_timeouts", 0)
    with Traffic(bench.port) as traffic:
        time.sleep(0.5)
        stopped = time.monotonic()
        bench.signal_epp(signal.SIGSTOP)
        time.sleep(0.1)
        # New requests while it is hung (the traffic's own may be caught mid-response: Envoy
        # then waits for the picker's reply to the response side without a message timeout,
        # up to the route's timeout; docs/epp.md, failure modes).
        probes = [chat(bench.port) for _ in range(2)]
        time.sleep(max(0.0, stopped + 3 * MESSAGE_TIMEOUT_S + 0.5 - time.monotonic()))
        resumed = time.monotonic()
        bench.signal_epp(signal.SIGCONT)
        assert wait_flowing(bench, 30.0)
        flowing = time.monotonic()
        time.sleep(0.5)
    for status, seconds, _ in probes:
        assert status == 504, probes  # Envoy's answer when the EPP's reply does not come in time
        assert MESSAGE_TIMEOUT_S - 0.1 <= seconds < MESSAGE_TIMEOUT_S + 2.0, probes  # busy machine
    started_hung = traffic.between(stopped + 0.05, resumed - MESSAGE_TIMEOUT_S - 0.2)
    assert all(status == 504 for _, status, _, _ in started_hung), started_hung
    assert bench.envoy.stats()["http.inference.ext_proc.message_timeouts"] > timeouts_before
    assert [r for r in traffic.between(flowing, time.monotonic()) if r[1] == 200]
    assert bench.served("u3") == 0, "a request was routed around the EPP"
