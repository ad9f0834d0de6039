"""Celery tasks of the control loop: thin wrappers over the services, and their beat schedule.

``celery -A trafficmgr beat`` imports this module through the app's task autodiscovery before
it reads ``beat_schedule``, so the schedule below is what beat runs: a tick every
``TRAFFICMGR["TICK_SECONDS"]`` (each expiring after one interval, so a backlog behind a slow
worker is dropped instead of run back to back) and an hourly purge of old history.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from django.conf import settings

from regions import controlloop, ingest
from trafficmgr.celery import app

HISTORY_PURGE_EVERY_S = 3600.0


@app.task(name="regions.tasks.tick", ignore_result=True)
def tick() -> dict[str, Any]:
    """Run one control-loop tick now (skipped when another is running)."""
    result = controlloop.run_tick(time.time(), keep_heap=True)
    return {
        "ran": result.ran,
        "version": result.version,
        "changed": result.changed,
        "duration_s": result.duration_s,
        "overran": result.overran,
    }


def purge_history_now(now: float) -> dict[str, int]:
    """Delete heartbeat samples and table versions older than the retention (keep the head)."""
    from regions.models import RoutingTableVersion

    days = float(settings.TRAFFICMGR.get("HEARTBEAT_RETENTION_DAYS", 7))
    samples = ingest.purge_history(now, days)
    cutoff = dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=days)
    head = RoutingTableVersion.objects.values_list("pk", flat=True).first()
    versions, _ = (
        RoutingTableVersion.objects.filter(generated_at__lt=cutoff).exclude(pk=head).delete()
    )
    return {"heartbeat_samples": samples, "table_versions": versions}


@app.task(name="regions.tasks.purge_history", ignore_result=True)
def purge_history() -> dict[str, int]:
    """Delete history older than ``TRAFFICMGR["HEARTBEAT_RETENTION_DAYS"]``."""
    return purge_history_now(time.time())


def beat_schedule() -> dict[str, dict[str, Any]]:
    interval = controlloop.tick_seconds()
    return {
        "trafficmgr-tick": {
            "task": "regions.tasks.tick",
            "schedule": interval,
            "options": {"expires": max(interval, 0.5)},
        },
        "trafficmgr-purge-history": {
            "task": "regions.tasks.purge_history",
            "schedule": HISTORY_PURGE_EVERY_S,
            "options": {"expires": HISTORY_PURGE_EVERY_S},
        },
    }


app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **beat_schedule()}

# Drill tasks (run, reap dangling drills, scheduled practice runs) register with this app.
from regions import drill_tasks  # noqa: E402, F401
