"""The agent loop end to end: collectors, pusher and a real local control plane."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from agents.agent import Agent
from agents.heartbeat import ProbeReading
from agents.nvml import NvmlCollector
from agents.push import HEARTBEAT_PATH, Pusher, Reply
from tests.agents.conftest import HANG, Stub
from tests.agents.fake_nvml import FakeNvml


def healthy_probe(kind: str | None) -> ProbeReading:
    return ProbeReading(True, 3.0, 200, "ok", ("llama-3-70b",))


def make_agent(stub: Stub, fake_nvml: FakeNvml, interval_s: float = 0.05, **kw: Any) -> Agent:
    gpu = NvmlCollector(fake_nvml)
    gpu.open()
    pusher = Pusher(stub.url, "tok", timeout=0.2, backoff_base=0.02, backoff_max=0.05)
    return Agent(
        "euw-1",
        pusher=pusher,
        gpu=gpu,
        probe=healthy_probe,
        interval_s=interval_s,
        flush_s=0.5,
        **kw,
    )


def run_in_thread(agent: Agent) -> threading.Thread:
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    return thread


def wait_for(condition: Any, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def posted(stub: Stub) -> list[dict[str, Any]]:
    return [s.json() for s in stub.posts(HEARTBEAT_PATH)]


def stop(agent: Agent, thread: threading.Thread) -> None:
    agent.stop()
    thread.join(2.0)
    assert not thread.is_alive()


def test_heartbeats_carry_the_section_6_fields(stub: Stub, fake_nvml: FakeNvml) -> None:
    stub.on("POST", HEARTBEAT_PATH, (200, {}))
    agent = make_agent(stub, fake_nvml)
    thread = run_in_thread(agent)
    try:
        assert wait_for(lambda: len(posted(stub)) >= 3)
    finally:
        stop(agent, thread)
    hb = posted(stub)[0]
    assert {"endpoint", "seq", "sent_at", "gpus", "server", "probe"} <= set(hb)
    assert hb["endpoint"] == "euw-1" and len(hb["gpus"]) == 8
    assert hb["gpus"][5]["lost"] is True and hb["gpus"][3]["throttle_reasons"]
    assert hb["probe"]["ok"] is True
    sent = [h["seq"] for h in posted(stub)]
    assert sent == sorted(sent) and len(set(sent)) == len(sent)


def test_survives_500s_garbage_and_hangs(stub: Stub, fake_nvml: FakeNvml) -> None:
    stub.on("POST", HEARTBEAT_PATH, (500, ""), (200, "not json"), HANG, (503, ""), (200, {}))
    agent = make_agent(stub, fake_nvml)
    thread = run_in_thread(agent)
    try:
        assert wait_for(lambda: len(posted(stub)) >= 8)
        assert thread.is_alive() and agent.ticks >= 3
    finally:
        stop(agent, thread)
    assert agent.pusher is not None and agent.pusher.garbage_replies == 1


def test_interval_from_the_reply_is_obeyed_at_once(stub: Stub, fake_nvml: FakeNvml) -> None:
    stub.on("POST", HEARTBEAT_PATH, (200, {"interval_s": 0.05}))
    agent = make_agent(stub, fake_nvml, interval_s=30.0)  # would sleep 30 s without the reply
    thread = run_in_thread(agent)
    try:
        assert wait_for(lambda: len(posted(stub)) >= 4)
        assert agent.interval_s == 0.05
    finally:
        stop(agent, thread)
    assert posted(stub)[-1]["interval_s"] == 0.05


def test_drill_from_the_reply_then_back_to_the_truth(stub: Stub, fake_nvml: FakeNvml) -> None:
    drill = {"kind": "report_unhealthy", "duration_s": 0.4, "id": "drill-7"}
    stub.on("POST", HEARTBEAT_PATH, (200, {"drill": drill}))  # repeated: must not extend it
    agent = make_agent(stub, fake_nvml)
    thread = run_in_thread(agent)
    try:
        assert wait_for(lambda: any(h.get("drill") for h in posted(stub)))
        started = time.monotonic()
        assert wait_for(lambda: posted(stub)[-1]["probe"]["ok"] is True)
        assert time.monotonic() - started < 0.8
    finally:
        stop(agent, thread)
    drilled = [h for h in posted(stub) if h.get("drill")]
    assert all(h["probe"]["ok"] is False for h in drilled)
    assert drilled[0]["drill"]["id"] == "drill-7"
    assert "drill" not in posted(stub)[-1]


def test_silence_drill_sends_nothing(stub: Stub, fake_nvml: FakeNvml) -> None:
    agent = make_agent(stub, fake_nvml)
    agent.handle_reply(Reply(200, drill={"kind": "silence", "duration_s": 60}))
    assert agent.tick() is None
    assert agent.pusher is not None and agent.pusher.pending() == 0


def test_a_silenced_agent_polls_for_a_cancel_without_reporting(
    stub: Stub, fake_nvml: FakeNvml
) -> None:
    poll = f"{HEARTBEAT_PATH}euw-1/drill"
    cancel = {"kind": "none", "id": "drill-9-end"}
    stub.on("GET", poll, (200, {"drill": None}), (200, {"drill": cancel}), (200, {"drill": None}))
    now = [100.0]
    agent = make_agent(stub, fake_nvml, clock=lambda: now[0])
    agent.handle_reply(Reply(200, drill={"kind": "silence", "duration_s": 60}))

    def polls() -> list[Any]:
        return [s for s in stub.seen if s.method == "GET" and s.path == poll]

    assert agent.tick() is None and len(polls()) == 1  # nothing pending yet
    now[0] += 1.0
    assert agent.tick() is None and len(polls()) == 1  # not more often than SILENT_POLL_S
    now[0] += 1.5
    assert agent.tick() is None and len(polls()) == 2  # the abort arrives: silence ends
    assert not agent.drills.silenced()
    assert agent.tick() is not None and len(polls()) == 2
    assert posted(stub) == [] and polls()[0].headers["Authorization"] == "Bearer tok"


def test_an_older_control_plane_is_not_polled_again(stub: Stub, fake_nvml: FakeNvml) -> None:
    now = [100.0]
    agent = make_agent(stub, fake_nvml, clock=lambda: now[0])  # the stub answers 404
    agent.handle_reply(Reply(200, drill={"kind": "silence", "duration_s": 60}))
    for _ in range(3):
        assert agent.tick() is None
        now[0] += 5.0
    assert len([s for s in stub.seen if s.method == "GET"]) == 1


def test_bad_drill_is_logged_and_ignored(
    stub: Stub, fake_nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(stub, fake_nvml)
    agent.handle_reply(Reply(200, drill={"kind": "meteor", "duration_s": 5}))
    assert "ignored a drill instruction" in caplog.text
    assert agent.drills.active() is None


def test_broken_collector_is_reported_not_fatal(stub: Stub, fake_nvml: FakeNvml) -> None:
    agent = make_agent(stub, fake_nvml)

    def explode() -> Any:
        raise RuntimeError("driver went away")

    assert agent.gpu is not None
    agent.gpu.read = explode  # type: ignore[method-assign]
    hb = agent.tick()
    assert hb is not None and hb.gpus == ()
    assert hb.agent is not None and "driver went away" in hb.agent.errors[0]


def test_clock_skew_is_warned_about(
    stub: Stub, fake_nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(stub, fake_nvml)
    agent.handle_reply(Reply(200, server_time=time.time() - 300))
    assert "clock is +300 s off" in caplog.text


def test_stale_seq_is_explained_once(
    stub: Stub, fake_nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(stub, fake_nvml)
    for _ in range(3):
        agent.handle_reply(Reply(200, refused="stale seq"))
    agent.handle_reply(Reply(200))
    assert caplog.text.count("did not apply it: stale seq") == 1
