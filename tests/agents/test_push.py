"""Heartbeat delivery against a real local HTTP server: 500s, garbage, hangs, backoff, buffer."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from agents.push import HEARTBEAT_PATH, Pusher, Reply, parse_reply, unknown_optional_key
from tests.agents.conftest import HANG, Stub

TOKEN = "agent-token-s3cret"


def heartbeat(seq: int) -> dict[str, Any]:
    return {
        "endpoint": "euw-1",
        "seq": seq,
        "sent_at": "2025-01-01T00:00:00.000Z",
        "gpus": [],
        "server": None,
        "probe": {"ok": True, "latency_ms": 3.0},
    }


def pusher(stub: Stub, **kwargs: Any) -> Pusher:
    kwargs.setdefault("timeout", 0.3)
    return Pusher(stub.url, TOKEN, rng=random.Random(7), **kwargs)


def seqs(stub: Stub) -> list[int]:
    return [s.json()["seq"] for s in stub.posts(HEARTBEAT_PATH)]


def wait_for(condition: Any, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_posts_json_with_the_bearer_token(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (202, {"status": "accepted"}))
    p = pusher(stub)
    p.submit(heartbeat(1))
    assert p.deliver() == 1
    (seen,) = stub.posts(HEARTBEAT_PATH)
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.json() == heartbeat(1)
    assert p.pending() == 0 and p.sent == 1


def test_500_keeps_the_heartbeat_and_backs_off(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (500, "Internal Server Error"), (200, {}))
    p = pusher(stub, backoff_base=1.0)
    p.submit(heartbeat(1))
    assert p.deliver() == 0
    assert p.pending() == 1 and p.failures == 1
    assert 0.4 < p.retry_in() <= 1.0
    assert p.deliver() == 1
    assert p.failures == 0 and p.retry_in() == 0
    assert seqs(stub) == [1, 1]


@pytest.mark.parametrize(
    "body", ["<html>502 Bad Gateway</html>", "[1, 2]", '{"interval_s": "fast"}', "\x00\xff"]
)
def test_garbage_reply_is_counted_not_fatal(stub: Stub, body: str) -> None:
    stub.on("POST", HEARTBEAT_PATH, (200, body))
    replies: list[Reply] = []
    p = pusher(stub, on_reply=replies.append)
    p.submit(heartbeat(1))
    assert p.deliver() == 1
    assert p.garbage_replies == 1 and replies[0].garbage
    assert replies[0].interval_s is None


def test_hang_times_out_and_keeps_the_heartbeat(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, HANG)
    p = pusher(stub, timeout=0.2)
    p.submit(heartbeat(1))
    started = time.monotonic()
    assert p.deliver() == 0
    assert 0.15 < time.monotonic() - started < 0.8
    assert p.pending() == 1 and p.failures == 1


def test_refused_for_good_is_dropped_and_the_next_goes(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (400, {"seq": ["must be an integer"]}), (200, {}))
    p = pusher(stub)
    p.submit(heartbeat(1))
    p.submit(heartbeat(2))
    assert p.deliver() == 1
    assert p.dropped == 1 and p.pending() == 0 and p.failures == 0
    assert seqs(stub) == [1, 2]


def test_auth_failure_is_retried_and_explained(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    stub.on("POST", HEARTBEAT_PATH, (401, {"detail": "Invalid token."}))
    p = pusher(stub)
    p.submit(heartbeat(1))
    assert p.deliver() == 0 and p.pending() == 1
    assert "check the agent token and endpoint name" in caplog.text


def test_retry_after_is_honoured(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (503, "busy", {"Retry-After": "4"}))
    p = pusher(stub, backoff_base=0.1, backoff_max=10.0)
    p.submit(heartbeat(1))
    p.deliver()
    assert 3.5 < p.retry_in() <= 4.0


def test_buffer_is_bounded_and_keeps_the_newest(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (200, {}))
    p = pusher(stub, buffer_size=3)
    for seq in range(1, 11):
        p.submit(heartbeat(seq))
    assert p.pending() == 3 and p.dropped == 7
    assert [h["seq"] for h in p.snapshot()] == [8, 9, 10]
    assert p.deliver() == 3
    assert seqs(stub) == [8, 9, 10]  # oldest kept first, in order


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    p = Pusher("http://127.0.0.1:1", TOKEN, backoff_base=0.5, backoff_max=8.0, rng=random.Random(3))
    for failures, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (9, 8.0)]:
        p.failures = failures
        delays = [p.backoff_delay() for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered


def test_reply_fields() -> None:
    reply = parse_reply(
        200,
        b'{"interval_s": 0.5, "drill": {"kind": "silence", "duration_s": 10}}',
        "Wed, 01 Jan 2025 00:00:00 GMT",
    )
    assert reply.interval_s == 0.5 and reply.drill == {"kind": "silence", "duration_s": 10}
    assert reply.server_time == 1735689600.0 and not reply.garbage
    assert parse_reply(200, b'{"interval_s": 0.001}').interval_s == 0.05  # clamped
    assert parse_reply(200, b'{"interval_s": 1e9}').interval_s == 3600
    assert parse_reply(200, b"").interval_s is None
    assert parse_reply(200, b'{"interval_s": NaN}').garbage


def test_background_thread_delivers_after_the_outage(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, (500, ""), (502, ""), HANG, (200, {}))
    p = pusher(stub, timeout=0.1, backoff_base=0.02, backoff_max=0.05)
    p.start()
    try:
        for seq in range(1, 4):
            p.submit(heartbeat(seq))
        assert wait_for(lambda: p.pending() == 0)
    finally:
        p.stop(flush_s=0.5)
    assert seqs(stub)[-3:] == [1, 2, 3] and p.failures == 0


def test_stop_gives_up_on_a_hung_control_plane_within_the_deadline(stub: Stub) -> None:
    stub.on("POST", HEARTBEAT_PATH, HANG)
    p = pusher(stub, timeout=5.0)
    p.start()
    p.submit(heartbeat(1))
    assert wait_for(lambda: len(stub.posts(HEARTBEAT_PATH)) == 1)
    started = time.monotonic()
    p.stop(flush_s=0.3)
    assert time.monotonic() - started < 0.6


def test_refusal_detail_is_logged_once(stub: Stub, caplog: pytest.LogCaptureFixture) -> None:
    refusal = (400, {"endpoint": ["unknown endpoint 'euw-9'"]})
    stub.on("POST", HEARTBEAT_PATH, refusal)
    p = pusher(stub)
    for seq in (1, 2, 3):
        p.submit(heartbeat(seq))
    caplog.set_level("DEBUG", logger="agents.push")
    assert p.deliver() == 0 and p.dropped == 3
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "unknown endpoint 'euw-9'" in errors[0].getMessage()


def test_taken_but_not_applied_reply() -> None:
    reply = parse_reply(200, b'{"accepted": false, "reason": "stale seq"}')
    assert reply.refused == "stale seq" and not reply.garbage
    assert parse_reply(200, b'{"accepted": true, "interval_s": 1}').refused is None


def gpu_heartbeat(seq: int) -> dict[str, Any]:
    gpu = {"index": 0, "uuid": "GPU-0", "util_pct": 58.4, "util_source": "gpm_sm"}
    return {**heartbeat(seq), "gpus": [gpu, {**gpu, "index": 1}]}


def test_an_older_control_plane_gets_heartbeats_without_the_optional_key(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    detail = "gpus[0].util_source: unknown field"
    refusal = (
        400,
        {
            "error": "invalid",
            "detail": detail,
            "fields": {"gpus[0].util_source": ["unknown field"]},
        },
    )

    def answer(seen: Any) -> Any:
        gpus = seen.json()["gpus"]
        return refusal if any("util_source" in g for g in gpus) else (200, {"accepted": True})

    stub.on("POST", HEARTBEAT_PATH, answer)
    p = pusher(stub)
    p.submit(gpu_heartbeat(1))
    p.submit(gpu_heartbeat(2))
    caplog.set_level("WARNING", logger="agents.push")
    assert p.deliver() == 2 and p.dropped == 0
    posted = [s.json() for s in stub.posts(HEARTBEAT_PATH)]
    assert [d["seq"] for d in posted] == [1, 1, 2]  # refused once, then sent again at once
    assert posted[1]["gpus"] == [
        {"index": 0, "uuid": "GPU-0", "util_pct": 58.4},
        {"index": 1, "uuid": "GPU-0", "util_pct": 58.4},
    ]
    assert p.omitted == {"util_source"}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "gpus[].util_source" in warnings[0]


def test_other_refusals_of_a_gpu_field_still_drop_the_heartbeat(stub: Stub) -> None:
    for field in ("gpus[0].util_pct", "gpus[0].colour", "util_source"):
        assert (
            unknown_optional_key(json.dumps({"fields": {field: ["unknown field"]}}).encode())
            is None
        )
    assert unknown_optional_key(b"not json") is None
    assert unknown_optional_key(b'{"fields": {"gpus[3].util_source": ["expected one of"]}}') is None
    stub.on("POST", HEARTBEAT_PATH, (400, {"fields": {"gpus[0].util_pct": ["outside 0..100"]}}))
    p = pusher(stub)
    p.submit(gpu_heartbeat(1))
    assert p.deliver() == 0 and p.dropped == 1 and p.omitted == set()
    assert len(stub.posts(HEARTBEAT_PATH)) == 1
