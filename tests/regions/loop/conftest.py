"""Fixtures of the control loop's tests: a world with an EU residency rule, agents, feeds.

The loop world is ``tests.worlds.GDPR``: ``eu-west`` (IE) and ``eu-central`` (DE) hold the
strict ``gdpr`` rule for EU clients; ``us-east`` (US) and ``ap-south`` (IN, priority 2) serve
everyone else. The failover policy is fail_closed; tests that want fail_open switch it.

Every test gets a fresh in-process hot state; tests marked ``integration`` build their own
Redis store from ``redis_url`` (a copy of tests/integration/conftest.py's fixture: conftest
fixtures do not cross directories).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.worlds import GDPR

REGION_OF = {
    "euw-1": "eu-west",
    "euw-2": "eu-west",
    "euc-1": "eu-central",
    "use-1": "us-east",
    "aps-1": "ap-south",
}
ENDPOINTS = tuple(REGION_OF)
API = "/api/v1"
GB_IP = "81.2.69.142"
DE_IP = "78.46.0.1"
US_IP = "8.8.8.8"
IN_IP = "49.207.0.1"


@pytest.fixture(autouse=True)
def fresh_hot_state() -> Iterator[Any]:
    """A fresh in-process hot state and empty per-process caches for each test."""
    from regions import hotstate
    from regions.caches import reset_process_state

    store = hotstate.MemoryHotState()
    reset_process_state(store)
    yield store
    reset_process_state(None)


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    """The test client speaks plain HTTP; without TLS settings it would get 301 to https."""
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture
def loop_world(db: None) -> Any:
    """Apply the loop world; returns the stored fleet as the engine sees it."""
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
    from regions.fleet.services import fleet_snapshot
    from trafficmgr.fleetfile import load_fleet_text

    with acting_as("fixture:loop_world", "system"):
        apply_plan(plan_fleet(load_fleet_text(GDPR)))
    return fleet_snapshot()


@pytest.fixture
def agent_tokens(loop_world: Any) -> dict[str, Any]:
    """An agent token per region of the loop world: region → (token, secret)."""
    from regions.access.issue import create_token

    return {
        r: create_token(f"agent-{r}", "agent", region=r, created_by="tests")
        for r in sorted(set(REGION_OF.values()))
    }


@pytest.fixture
def agent_api(agent_tokens: dict[str, Any]) -> Callable[[str], Any]:
    """``agent_api("eu-west")``: an API client holding that region's agent token."""
    from rest_framework.test import APIClient

    def make(region: str) -> Any:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_tokens[region][1]}")
        return client

    return make


def hb_doc(
    endpoint: str,
    seq: int,
    sent_at: float,
    *,
    gpus: int = 2,
    util: float = 40.0,
    running: int = 4,
    waiting: int = 0,
    kv: float = 0.3,
    probe_ok: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """A heartbeat as the agent sends it (see agents/heartbeat.py ``to_json``)."""
    from agents.heartbeat import iso8601

    doc: dict[str, Any] = {
        "endpoint": endpoint,
        "seq": seq,
        "sent_at": iso8601(sent_at),
        "interval_s": 1.0,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{endpoint}-{i}",
                "name": "NVIDIA H100",
                "util_pct": util,
                "mem_used_mb": 40000.0,
                "mem_total_mb": 81559.0,
                "temp_c": 60.0,
                "power_w": 350.0,
                "power_limit_w": 700.0,
                "throttle_reasons": [],
                "ecc_errors": 0,
                "ecc_corrected": 0,
                "xid_errors": 0,
                "xid_last": None,
                "lost": False,
                "errors": [],
            }
            for i in range(gpus)
        ],
        "server": {
            "kind": "vllm",
            "requests_running": running,
            "requests_waiting": waiting,
            "kv_cache_usage": kv,
            "tokens_per_s": 1500.0,
            "ttft_p50_ms": 120.0,
            "ttft_p99_ms": 480.0,
            "models_loaded": [],
            "scrape_ok": True,
            "garbage_lines": 0,
            "error": None,
        },
        "probe": {"ok": probe_ok, "latency_ms": 35.0, "status": 200, "reason": ""},
        "agent": {
            "version": "0.1.0",
            "nvml": "simulated",
            "driver": None,
            "dropped": 0,
            "errors": [],
        },
    }
    doc.update(extra)
    return doc


@pytest.fixture
def feed(agent_tokens: dict[str, Any]) -> Callable[..., None]:
    """``feed(at, endpoints=ENDPOINTS, **doc_args)``: ingest heartbeats received at ``at``."""
    from regions.loop import ingest

    def send(at: float, endpoints: tuple[str, ...] | list[str] = ENDPOINTS, **kwargs: Any) -> None:
        for name in endpoints:
            token = agent_tokens[REGION_OF[name]][0]
            body = json.dumps(hb_doc(name, int(at * 1000), at, **kwargs)).encode()
            result = ingest.ingest(token, body, at)
            assert result.accepted, result.body

    return send


@pytest.fixture
def set_all_down(loop_world: Any) -> Callable[[str], None]:
    """Switch the default failover policy's all-down behaviour."""
    from regions.models import FailoverPolicy

    def switch(mode: str) -> None:
        FailoverPolicy.objects.filter(name="default").update(all_down=mode)
        from regions.fleet import snapshot

        snapshot.forget()

    return switch


@pytest.fixture
def redis_store(redis_url: str) -> Iterator[Any]:
    """A Redis hot state under a prefix of its own, removed afterwards."""
    from regions import hotstate
    from regions.hotstate.redis_store import RedisHotState

    store = RedisHotState(redis_url, prefix=f"trafficmgr-test-{uuid.uuid4().hex[:10]}")
    hotstate.use(store)
    yield store
    store.reset()
    hotstate.use(None)


def wait_for(check: Callable[[], Any], timeout: float, step: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)
