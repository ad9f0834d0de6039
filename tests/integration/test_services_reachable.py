"""The suite runs against the real services when they are configured."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_database_is_postgresql(postgres_db: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        assert cursor.fetchone()[0]


def test_readyz_reports_redis(redis_url: str) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}
