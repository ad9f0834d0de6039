"""What a tick leaves behind: events, the table history, the dashboard push.

History: every published version is pushed to the dashboard and the DNS servers, but a
``RoutingTableVersion`` row is written only when the table differs materially from the last
recorded one: a region changed state, a list moved at least ``HISTORY_MIN_MOVED`` of its
traffic, or ``HISTORY_MAX_GAP_S`` passed. Headroom moves weights a little on most ticks under
load; recording each of those would add ~86,000 rows a day and bury the changes that matter.
Each row's diff is against the previous row, so the history reads as one chain.

A new version's JSON, diff and diff document are computed once (``TableUpdate``) and shared
by the history row, the hot state's publish and the dashboard push.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db import models
from django.db.models.functions import Cast

from regions.models import DocumentField, Event, EventKind, RoutingTableVersion
from trafficmgr.contracts import json_bytes
from trafficmgr.routing.failover import Transition
from trafficmgr.routing.table import diff_tables, table_from_json, table_to_json
from trafficmgr.routing.table_diff import TableDiff
from trafficmgr.routing.types import RegionState, RoutingTable, WeightedRegion

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"
HISTORY_MIN_MOVED = 0.01
HISTORY_MAX_GAP_S = 300.0
MAX_DIFF_LISTS = 500

_recorded: RoutingTable | None = None
_recorded_lock = threading.Lock()


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


def entries_doc(entries: Sequence[WeightedRegion]) -> list[dict[str, Any]]:
    return [{"region": w.region, "weight": w.weight} for w in entries]


def diff_doc(diff: TableDiff) -> dict[str, Any]:
    """Return a diff as JSON (lists beyond ``MAX_DIFF_LISTS`` are counted, not listed)."""
    return {
        "old_version": diff.old_version,
        "new_version": diff.new_version,
        "summary": diff.summary(),
        "regions": [
            {
                "region": c.region,
                "old": c.old.value if c.old else None,
                "new": c.new.value if c.new else None,
                "reason": c.reason,
            }
            for c in diff.regions
        ],
        "lists": [
            {
                "zone": c.zone,
                "model": c.model,
                "moved": round(c.moved, 4),
                "old": entries_doc(c.old),
                "new": entries_doc(c.new),
            }
            for c in diff.lists[:MAX_DIFF_LISTS]
        ],
        "lists_changed": len(diff.lists),
    }


@dataclass(frozen=True, slots=True)
class TableUpdate:
    """A new table version with what its consumers need, each computed once."""

    table: RoutingTable
    previous: RoutingTable | None  # the table published before it
    diff: TableDiff  # from ``previous``
    diff_doc: dict[str, Any]
    doc: dict[str, Any]  # ``table_to_json``
    text: bytes  # ``doc`` as JSON

    @classmethod
    def of(cls, previous: RoutingTable | None, table: RoutingTable) -> TableUpdate:
        diff = diff_tables(previous, table)
        doc = table_to_json(table)
        return cls(table, previous, diff, diff_doc(diff), doc, json_bytes(doc))


def transition_doc(t: Transition) -> dict[str, Any]:
    return {
        "region": t.region,
        "old": t.old.value,
        "new": t.new.value,
        "at": t.at,
        "reason": t.reason,
    }


def endpoint_flips(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return endpoints whose health flipped since the last tick (with evidence both times)."""
    before = old.get("endpoints", {})
    flips = []
    for name, now_doc in new.get("endpoints", {}).items():
        was = before.get(name)
        if was is None or not (was.get("evidence") and now_doc.get("evidence")):
            continue
        if bool(was["healthy"]) != bool(now_doc["healthy"]):
            flips.append({"endpoint": name, **now_doc})
    return flips


def _why(t: Transition) -> str:
    """The transition's reason without its leading state: the engine's reasons start with the
    new state ("healthy: ..."), which the message already names after the arrow."""
    return t.reason.removeprefix(f"{t.new.value}: ")


def _severity(state: RegionState) -> str:
    if state is RegionState.DOWN:
        return "error"
    return "warning" if state is RegionState.DEGRADED else "info"


def record_events(
    transitions: Iterable[Transition], flips: Iterable[Mapping[str, Any]], version: str, now: float
) -> None:
    """Store an Event per region transition and per endpoint health flip."""
    rows = event_rows(transitions, flips, version, now)
    if rows:
        Event.objects.bulk_create(rows)


def event_rows(
    transitions: Iterable[Transition], flips: Iterable[Mapping[str, Any]], version: str, now: float
) -> list[Event]:
    """Build an Event per region transition and per endpoint health flip (not stored yet)."""
    at = _utc(now)
    rows = [
        Event(
            uid=uuid.uuid4().hex,
            at=at,
            kind=EventKind.FAILOVER
            if RegionState.DOWN in (t.old, t.new) or t.new is RegionState.RECOVERING
            else EventKind.HEALTH,
            severity=_severity(t.new),
            region=t.region,
            message=f"region {t.region}: {t.old.value} → {t.new.value}: {_why(t)}"[:2000],
            data=transition_doc(t) | {"table_version": version},
        )
        for t in transitions
    ]
    rows += [
        Event(
            uid=uuid.uuid4().hex,
            at=at,
            kind=EventKind.HEALTH,
            severity="info" if f["healthy"] else "warning",
            region=f["region"],
            endpoint=f["endpoint"],
            message=(
                f"endpoint {f['endpoint']} "
                f"{'healthy' if f['healthy'] else 'unhealthy'}: {f['reason']}"
            )[:2000],
            data={"healthy": f["healthy"], "reason": f["reason"], "table_version": version},
        )
        for f in flips
    ]
    return rows


_EVENT_FIELDS = ("uid", "kind", "severity", "region", "endpoint", "message", "data")


def event_to_json(row: Event) -> bytes:
    """An unsaved event as the outbox keeps it."""
    doc = {name: getattr(row, name) for name in _EVENT_FIELDS}
    return json_bytes(doc | {"at": row.at.timestamp()})


def event_from_json(raw: bytes | str) -> Event:
    doc = json.loads(raw)
    texts = {name: str(doc.get(name) or "") for name in _EVENT_FIELDS if name != "data"}
    return Event(at=_utc(doc["at"]), data=doc.get("data") or {}, **texts)


def last_recorded(previous: RoutingTable | None = None) -> RoutingTable | None:
    """Return the newest recorded table, read from the database only when no copy is at hand.

    Usually the newest row is the table published before this one (``previous``, which the
    tick already holds) or this process's last write. Another worker process may have written
    it (Celery runs ticks in whichever process is free): then ``previous`` still matches
    whenever that table was recorded, and the row (~600 KB of JSON to parse) is read only when
    the head is an older table this process has not seen.
    """
    global _recorded
    head = RoutingTableVersion.objects.values_list("version", flat=True).first()
    if head is None:
        return None
    if previous is not None and previous.version == head:
        return previous
    with _recorded_lock:
        if _recorded is None or _recorded.version != head:
            row = RoutingTableVersion.objects.filter(version=head).first()
            _recorded = table_from_json(row.table) if row is not None else None
        return _recorded


def should_record(diff: TableDiff, recorded: RoutingTable | None, now: float) -> bool:
    """Tell whether a new version is worth a history row (see the module docstring)."""
    if recorded is None or diff.regions:
        return True
    return diff.max_moved >= HISTORY_MIN_MOVED or now - recorded.generated_at >= HISTORY_MAX_GAP_S


def _version_of(table: RoutingTable | None) -> str | None:
    return table.version if table is not None else None


def _as_json(text: bytes) -> Cast:
    """Store JSON text as it is: the database parses it, nothing encodes it again."""
    return Cast(models.Value(text.decode()), output_field=DocumentField())


def record_version(update: TableUpdate, now: float) -> bool:
    """Store the table in the history when it changed materially; return whether it did."""
    global _recorded
    table = update.table
    recorded = last_recorded(update.previous)
    if recorded is not None and recorded.version == table.version:
        return False
    same_base = _version_of(recorded) == _version_of(update.previous)
    diff = update.diff if same_base else diff_tables(recorded, table)
    if not should_record(diff, recorded, now):
        return False
    # A version is a content hash: a table may return to an earlier content. The row then
    # moves to the head of the history with its new diff (one INSERT ... ON CONFLICT).
    row = RoutingTableVersion(
        version=table.version,
        generated_at=_utc(table.generated_at),
        table=_as_json(update.text),
        diff=_as_json(json_bytes(update.diff_doc if same_base else diff_doc(diff))),
        reason=diff.summary()[:2000],
    )
    RoutingTableVersion.objects.bulk_create(
        [row],
        update_conflicts=True,
        unique_fields=["version"],
        update_fields=["generated_at", "table", "diff", "reason"],
    )
    with _recorded_lock:
        _recorded = table
    return True


def forget() -> None:
    """Drop the cached last recorded table (tests)."""
    global _recorded
    _recorded = None


def notify_dashboard(update: TableUpdate, transitions: Sequence[Transition]) -> None:
    """Push the new table to the dashboard group; a dashboard failure never fails a tick."""
    table = update.table
    try:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        message = {
            "type": "table.update",
            "version": table.version,
            "table": update.doc,
            "diff": update.diff_doc,
            "transitions": [transition_doc(t) for t in transitions],
        }
        async_to_sync(layer.group_send)(DASHBOARD_GROUP, message)
    except Exception:
        log.exception("could not notify the dashboard of table %s", table.version)
