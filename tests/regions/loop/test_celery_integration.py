"""A real ``celery -A trafficmgr worker`` and ``beat`` tick against real Redis and PostgreSQL.

The subprocesses use the test database (committed rows: a transactional test) and a Redis
database of their own (index 14, flushed before and after), so the keys they write cannot
meet anyone else's. Bounded: the whole test gives up after ~50 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import pytest

from tests.regions.loop.conftest import ENDPOINTS, REGION_OF, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[3]
REDIS_DB = 14


def own_database(url: str) -> str:
    parsed = urlparse(url)
    return urlunparse(parsed._replace(path=f"/{REDIS_DB}"))


def database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def celery_redis(redis_url: str) -> Iterator[Any]:
    from regions import hotstate
    from regions.hotstate.redis_store import RedisHotState

    url = own_database(redis_url)
    store = RedisHotState(url)
    store.redis.flushdb()
    hotstate.use(store)
    yield store
    store.redis.flushdb()
    hotstate.use(None)


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    celery = str(Path(sys.executable).with_name("celery"))
    return subprocess.Popen(
        [celery, "-A", "trafficmgr", *args],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def test_worker_and_beat_publish_and_fail_over(
    postgres_db: str, celery_redis: Any, agent_tokens: Any, tmp_path: Path
) -> None:
    import json

    from regions.loop import ingest
    from regions.models import RoutingTableVersion
    from tests.regions.loop.conftest import hb_doc

    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": own_database(os.environ["REDIS_URL"]),
        "TRAFFICMGR_TICK_SECONDS": "1",
        "TRAFFICMGR_TLS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    silent: set[str] = set()
    stopping = threading.Event()

    def agents() -> None:
        from django.db import connection

        try:
            while not stopping.is_set():
                now = time.time()
                for name in ENDPOINTS:
                    if name not in silent:
                        body = json.dumps(hb_doc(name, int(now * 1000), now)).encode()
                        ingest.ingest(agent_tokens[REGION_OF[name]][0], body, now)
                stopping.wait(0.5)
        finally:
            connection.close()

    feeder = threading.Thread(target=agents, daemon=True)
    worker = start(
        [
            "worker",
            "-P",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
            "-n",
            "loop-test@%h",
        ],
        env,
        tmp_path / "worker.log",
    )
    beat = start(
        ["beat", "-l", "INFO", "-s", str(tmp_path / "beat-schedule")], env, tmp_path / "beat.log"
    )
    feeder.start()
    try:
        table = wait_for(lambda: celery_redis.table(), timeout=30)
        healthy = wait_for(
            lambda: (
                (t := celery_redis.table()) is not None
                and t.regions["eu-west"].state.value == "healthy"
                and t
            ),
            timeout=10,
        )
        assert RoutingTableVersion.objects.filter(version=healthy.version).exists()
        silent.update({"euw-1", "euw-2"})
        down = wait_for(
            lambda: (
                (t := celery_redis.table()) is not None
                and t.regions["eu-west"].state.value == "down"
                and t
            ),
            timeout=12,
        )
        assert down.version != table.version
        # counts reach Redis from each process every 0.5 s (regions.metrics): wait for them
        ran = wait_for(
            lambda: (n := celery_redis.counters().get("ticks|result=ran", 0)) >= 4 and n,
            timeout=5,
        )
        assert ran >= 4
        assert celery_redis.tick_info()["last_at"] > time.time() - 5
    except AssertionError:
        for log in ("worker.log", "beat.log"):
            print(f"--- {log}\n" + (tmp_path / log).read_text()[-3000:])
        raise
    finally:
        stopping.set()
        feeder.join(5)
        stop(beat)
        stop(worker)
    assert "Sending due task trafficmgr-tick" in (tmp_path / "beat.log").read_text()
