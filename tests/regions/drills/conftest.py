"""Fixtures of the drill tests: the small named world (tests/conftest.py), a fresh hot state
that records drill instructions, a private cache for runner liveness, and heartbeats.

The world: ``eu-west`` healthy (euw-1, euw-2), ``us-east`` drained, ``ap-south`` the only
region Indian clients may use (strict). Drills are not dispatched unless a test runs them:
``dispatched`` collects the ids the API would have started.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from regions.drills import tasks
from regions.hotstate import MemoryHotState
from tests.regions.loop.conftest import hb_doc

REGION_OF = {
    "euw-1": "eu-west",
    "euw-2": "eu-west",
    "use-1": "us-east",
    "use-2": "us-east",
    "aps-1": "ap-south",
}
SERVING = ("euw-1", "euw-2", "aps-1")
REAL_DISPATCH = tasks.dispatch


class RecordingHotState(MemoryHotState):
    """The in-process hot state, keeping every drill instruction it was given."""

    def reset(self) -> None:
        super().reset()
        self.instructions: list[tuple[str, dict[str, Any]]] = []

    def set_drill(self, endpoint: str, instruction: Mapping[str, Any], ttl_s: float) -> None:
        self.instructions.append((endpoint, dict(instruction)))
        super().set_drill(endpoint, instruction, ttl_s)

    def kinds_for(self, endpoint: str) -> list[str]:
        return [doc["kind"] for name, doc in self.instructions if name == endpoint]


@pytest.fixture(autouse=True)
def store(settings: Any) -> Iterator[RecordingHotState]:
    """A fresh recording hot state, per-process caches emptied, a private liveness cache and
    an in-memory channel layer, whatever REDIS_URL says (Redis tests build their own store)."""
    from regions.caches import reset_process_state

    settings.SECURE_SSL_REDIRECT = False
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"drills-{uuid.uuid4().hex}",
        }
    }
    recording = RecordingHotState()
    reset_process_state(recording)
    yield recording
    reset_process_state(None)


@pytest.fixture(autouse=True)
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Drill ids the API started; nothing actually runs (``REAL_DISPATCH`` would)."""
    started: list[int] = []
    monkeypatch.setattr(tasks, "dispatch", started.append)
    return started


@pytest.fixture
def agent_tokens(world: Any) -> dict[str, Any]:
    from regions.access.issue import create_token

    return {
        r: create_token(f"agent-{r}", "agent", region=r, created_by="tests")[0]
        for r in sorted(set(REGION_OF.values()))
    }


@pytest.fixture
def healthy(agent_tokens: dict[str, Any]) -> Callable[..., float]:
    """``healthy(**doc_args)``: heartbeats of the serving endpoints, then a tick; returns now."""
    from regions.loop import ingest
    from regions.loop.control import run_tick

    def beat(endpoints: tuple[str, ...] = SERVING, **kwargs: Any) -> float:
        kwargs = {"kv": 0.05, "running": 2, "util": 5.0, **kwargs}  # lightly loaded unless told
        at = time.time()
        for name in endpoints:
            body = json.dumps(hb_doc(name, int(at * 1000), at, **kwargs)).encode()
            result = ingest.ingest(agent_tokens[REGION_OF[name]], body, at)
            assert result.accepted, result.body
        run_tick(at)
        return at

    return beat


def api_drill(client: Any, **body: Any) -> Any:
    return client.post("/api/v1/drills/", data=json.dumps(body), content_type="application/json")


@pytest.fixture
def feeder(healthy: Callable[..., float]) -> Iterator[Callable[[tuple[str, ...]], None]]:
    """``feeder(endpoints)``: heartbeats and a tick every half second from a thread."""
    import threading

    from django.db import connection

    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(endpoints: tuple[str, ...]) -> None:
        def run() -> None:
            try:
                while not stop.wait(0.5):
                    healthy(endpoints)
            finally:
                connection.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)
