"""How the table history is stored: whole documents, kept as written, compressed cheaply."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def test_documents_round_trip_as_written() -> None:
    from regions.loop.history import _as_json
    from regions.models import RoutingTableVersion

    text = b'{"zones":{"DE":{"llama":[{"region":"eu-west","weight":1.0}]}},"n":[1,2.5,null]}'
    RoutingTableVersion.objects.create(
        version="v1", generated_at="2026-11-24T00:00:00Z", table=_as_json(text), diff={}
    )
    row = RoutingTableVersion.objects.get(version="v1")
    assert row.table == {
        "zones": {"DE": {"llama": [{"region": "eu-west", "weight": 1.0}]}},
        "n": [1, 2.5, None],
    }
    assert row.diff == {}
    assert RoutingTableVersion.objects.filter(table__zones__DE__isnull=False).count() == 1


@pytest.mark.integration
def test_postgresql_keeps_json_text_with_lz4() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the column types are PostgreSQL's (set DATABASE_URL)")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attcompression "
            "FROM pg_attribute WHERE attrelid = 'regions_routingtableversion'::regclass "
            "AND attname IN ('table', 'diff') ORDER BY attname"
        )
        columns: list[Any] = cursor.fetchall()
        cursor.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
            "AND 'lz4' = ANY(enumvals)"
        )
        has_lz4 = cursor.fetchone() is not None
    assert [(name, kind) for name, kind, _ in columns] == [("diff", "json"), ("table", "json")]
    if has_lz4:
        assert {c for _, _, c in columns} == {"l"}


def test_the_head_row_is_not_read_back_when_the_tick_holds_that_table(
    feed: Any, fresh_hot_state: Any
) -> None:
    """As when another worker process recorded the table this tick started from."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from regions.loop import history as controlrecord
    from regions.loop.control import run_tick
    from tests.regions.loop.conftest import ENDPOINTS

    feed(1_800_000_000.0, ENDPOINTS)
    assert run_tick(1_800_000_000.0, interval_s=1.0).recorded
    published = fresh_hot_state.table()
    controlrecord.forget()  # this process did not write the head row
    with CaptureQueriesContext(connection) as queries:
        assert controlrecord.last_recorded(published) is published
    assert len(queries) == 1 and '"table"' not in queries[0]["sql"]
    with CaptureQueriesContext(connection) as queries:
        recorded = controlrecord.last_recorded()
    assert recorded is not None and recorded.version == published.version
    assert len(queries) == 2
