"""Table history rows: the table as published, the diff from the row before, one row a version."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tests.regions.loop.conftest import ENDPOINTS

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0
OTHERS = tuple(e for e in ENDPOINTS if not e.startswith("euw"))


def rows() -> list[Any]:
    from regions.models import RoutingTableVersion

    return list(RoutingTableVersion.objects.all())  # newest first


def test_each_row_holds_its_table_and_the_diff_from_the_row_before(
    feed: Any, fresh_hot_state: Any
) -> None:
    from regions.loop.control import run_tick
    from regions.loop.history import diff_doc
    from trafficmgr.routing.table import diff_tables, table_from_json, table_to_json

    published = []
    for k in range(5):  # eu-west healthy, then silent until it goes down
        feed(T0 + k, ENDPOINTS if k == 0 else OTHERS)
        result = run_tick(T0 + k, interval_s=1.0)
        published.append(fresh_hot_state.table())
        assert result.recorded == (k in (0, 4)), k
    head, first = rows()
    assert [head.version, first.version] == [published[4].version, published[0].version]
    for row, table in ((head, published[4]), (first, published[0])):
        assert row.table == json.loads(json.dumps(table_to_json(table)))
    assert first.diff == diff_doc(diff_tables(None, published[0]))
    assert head.diff == diff_doc(diff_tables(table_from_json(first.table), published[4]))
    assert head.diff["regions"][0]["new"] == "down"
    assert head.reason and "eu-west healthy → down" in head.reason


def test_a_table_back_to_an_earlier_content_moves_its_row_to_the_head(loop_world: Any) -> None:
    from regions.loop.history import TableUpdate, record_version
    from trafficmgr.routing.table import static_table
    from trafficmgr.routing.types import RegionState

    first = static_table(loop_world, T0)
    statuses = dict(first.regions)
    statuses["eu-west"] = replace(statuses["eu-west"], state=RegionState.DOWN)
    down = replace(first, version="0123456789ab", generated_at=T0 + 1, regions=statuses)
    again = replace(first, generated_at=T0 + 2)
    assert record_version(TableUpdate.of(None, first), T0)
    assert record_version(TableUpdate.of(first, down), T0 + 1)
    assert record_version(TableUpdate.of(down, again), T0 + 2)
    assert not record_version(TableUpdate.of(down, again), T0 + 3)  # already the head
    head, older = rows()
    assert [head.version, older.version] == [first.version, down.version]
    assert head.generated_at.timestamp() == T0 + 2
    assert head.diff["old_version"] == down.version
    assert [(c["region"], c["old"], c["new"]) for c in head.diff["regions"]] == [
        ("eu-west", "down", "unknown")
    ]
