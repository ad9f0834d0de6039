"""Shared fixtures: a small named world and API clients holding tokens of each role.

The world (``tests.worlds.WORLD``): ``eu-west`` healthy (active, two endpoints), ``us-east``
draining (admin state drained), ``ap-south`` residency-locked (Indian clients may only go
there).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Defaults for a bare ``pytest`` run; real values from the environment win. pytest-django
# loads the settings before this file, so these reach the settings only when set earlier
# (the ``-p tests.services`` plugin); here they still reach every subprocess a test starts.
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
if "TRAFFICMGR_VAR_DIR" not in os.environ:
    _var_dir = tempfile.mkdtemp(prefix="trafficmgr-test-var-")
    os.environ["TRAFFICMGR_VAR_DIR"] = _var_dir
    atexit.register(shutil.rmtree, _var_dir, ignore_errors=True)

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worlds import WORLD


@pytest.fixture(autouse=True)
def _isolated_var_dir(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep anything a test writes under VAR_DIR out of the checkout's var/."""
    settings.VAR_DIR = tmp_path_factory.mktemp("var")


@pytest.fixture
def world_yaml() -> str:
    """The fleet file of the small named world."""
    return WORLD


@pytest.fixture
def world(db: None) -> Any:
    """Apply the small named world; returns the stored fleet as the engine sees it."""
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
    from regions.fleet.services import fleet_snapshot
    from trafficmgr.fleetfile import load_fleet_text

    with acting_as("fixture:world", "system"):
        apply_plan(plan_fleet(load_fleet_text(WORLD)))
    return fleet_snapshot()


@pytest.fixture
def world_file(tmp_path: Path) -> Path:
    """The world's fleet file on disk."""
    path = tmp_path / "fleet.yaml"
    path.write_text(WORLD)
    return path


@pytest.fixture
def make_client(db: None) -> Callable[..., Any]:
    """Build an APIClient holding a new token: ``make_client("operator")``."""
    from rest_framework.test import APIClient

    from regions.access.issue import create_token

    def make(role: str, region: str | None = None, name: str | None = None) -> Any:
        _, secret = create_token(name or f"test-{role}", role, region=region, created_by="tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        client.token_secret = secret
        return client

    return make


@pytest.fixture
def viewer_client(make_client: Callable[..., Any]) -> Any:
    return make_client("viewer")


@pytest.fixture
def operator_client(make_client: Callable[..., Any]) -> Any:
    return make_client("operator")


@pytest.fixture
def admin_client(make_client: Callable[..., Any]) -> Any:
    """An API client with an admin token (shadows pytest-django's session-based one)."""
    return make_client("admin")


@pytest.fixture
def agent_client(world: Any, make_client: Callable[..., Any]) -> Any:
    """An agent token bound to eu-west's endpoints (euw-1, euw-2)."""
    return make_client("agent", region="eu-west")


@pytest.fixture
def anon_client() -> Iterator[Any]:
    from rest_framework.test import APIClient

    yield APIClient()


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A real Redis from REDIS_URL, or skip (a failure under TRAFFICMGR_REQUIRE_SERVICES=1)."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        pytest.skip("REDIS_URL is not set")
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {url} does not answer: {exc}")
    yield url


@pytest.fixture
def postgres_db(django_db_blocker: object) -> str:
    """The test database's name when it is PostgreSQL, or skip.

    Tests whose threads write concurrently (live server, ticker, drill runner) need it: the
    in-memory SQLite test database cannot take concurrent writers.
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("DATABASE_URL does not point at PostgreSQL")
    return str(connection.settings_dict["NAME"])
