"""Database connections: pooled with a ceiling per process, none for requests refused early.

Before: each ASGI worker thread kept a connection for 60 s (12 concurrent clients reached
PostgreSQL's 100-connection limit) and every bearer secret, even garbage, cost a query.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from regions.access import auth


@pytest.fixture(autouse=True)
def empty_cache() -> Any:
    auth.cache.clear()
    yield
    auth.cache.clear()


def test_postgresql_connections_come_from_a_bounded_pool_per_process() -> None:
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("SQLite has no connection pool")
    pool = db["OPTIONS"]["pool"]
    assert 1 <= pool["max_size"] <= 16, pool
    assert pool["timeout"] <= 5, "a request must not wait long for a connection"
    assert db["CONN_MAX_AGE"] == 0, "pooled connections go back after each request"


@pytest.mark.parametrize(
    "secret",
    ["garbage", "tmk_short", "tma_" + "!" * 43, "tmk_" + "a" * 44, "Bearer", "x" * 2000],
)
def test_a_malformed_secret_is_refused_without_a_query(world: Any, secret: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/regions/")
    assert response.status_code == 401
    assert len(queries) == 0, [q["sql"] for q in queries]


def test_an_unknown_well_formed_secret_costs_one_query_not_one_per_request(world: Any) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer tmk_" + "a" * 43)
    assert client.get("/api/v1/regions/").status_code == 401
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            assert client.get("/api/v1/regions/").status_code == 401
    assert len(queries) == 0, [q["sql"] for q in queries]


def test_a_token_created_after_a_miss_works_at_once(world: Any, make_client: Any) -> None:
    unknown = "tmk_" + "b" * 43
    assert auth.resolve_token(unknown) is None
    fresh = make_client("viewer", name="new")  # a token write bumps the token version
    assert auth.resolve_token(fresh.token_secret) is not None
