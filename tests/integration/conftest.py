"""Fixtures that hand out real services, or skip when they are not configured."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def redis_url() -> Iterator[str]:
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
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("DATABASE_URL does not point at PostgreSQL")
    return str(connection.settings_dict["NAME"])
