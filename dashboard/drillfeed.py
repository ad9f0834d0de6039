"""The drills the dashboard shows: those under way with their live progress, and the last ones
with their verdict.

A drill's full report (figures, reasons, the timeline the page draws) is read when a reader
opens it, from ``GET /api/v1/drills/ID/``: sending every report to every page would cost
kilobytes per drill on each update. What is pushed is enough for the drills panel and for the
"drill" banner on every region a drill touches: a region taken down by a drill must not look
like a real outage.
"""

from __future__ import annotations

from typing import Any

from regions.api.drills.views import DrillSerializer
from regions.drills import progress
from regions.models import ACTIVE_DRILL_STATUSES, Drill

RECENT = 15
BRIEF = (
    "verdict",
    "fault_at",
    "detected_after_s",
    "table_changed_after_s",
    "dns_changed_after_s_max",
    "recovered_after_s",
    "wrong_answers",
    "residency_violations",
)


def drill_doc(drill: Drill, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """One drill as the API lists it, plus whom it touches, its verdict and its progress."""
    params = drill.params or {}
    resolved = params.get("resolved") or {}
    found = getattr(drill, "report", None)
    report = found.report if found is not None else None
    return {
        **DrillSerializer(drill).data,
        # As given: the guardrails' figures stay in the API (kilobytes per drill, every update).
        "params": {k: v for k, v in params.items() if k not in ("resolved", "guardrails")},
        "region": resolved.get("region", ""),
        "endpoints": list(resolved.get("endpoints", [])),
        "report": {k: report.get(k) for k in BRIEF} if isinstance(report, dict) else None,
        "progress": live,
    }


def active_docs() -> list[dict[str, Any]]:
    """Pending and running drills, oldest first, with their progress (one query, one cache
    read: the feed asks every half tick while one runs)."""
    active = list(
        Drill.objects.filter(status__in=ACTIVE_DRILL_STATUSES).order_by("created_at", "id")
    )
    live = progress.read_many([d.pk for d in active])
    return [drill_doc(d, live.get(d.pk)) for d in active]


def recent_docs() -> list[dict[str, Any]]:
    """The last ``RECENT`` drills, newest first, with their verdict (reads their reports: the
    feed asks only when a drill started, ended or was refused)."""
    recent = Drill.objects.select_related("report").order_by("-created_at", "-id")[:RECENT]
    return [drill_doc(d) for d in recent]


def drills_doc() -> dict[str, Any]:
    """``active``: drills under way with their progress; ``recent``: the last ones."""
    return {"active": active_docs(), "recent": recent_docs()}


def drills_message() -> dict[str, Any]:
    return {"type": "drills.update", **drills_doc()}
