"""The Celery tasks of the app and their beat schedule (an entry point: Celery imports it).

``celery -A trafficmgr beat`` imports this module through the app's task autodiscovery before
it reads ``beat_schedule``, so the schedule below is what beat runs: a tick every
``TRAFFICMGR["TICK_SECONDS"]`` (each expiring after one interval, so a backlog behind a slow
worker is dropped instead of run back to back), an hourly purge of old history, and the
drills' reaper and practice runs, and the alert worker. The tasks themselves live with their
features (``regions.loop.tasks``, ``regions.drills.tasks``, ``regions.alerts.tasks``).
"""

from __future__ import annotations

from typing import Any

from regions import conf
from regions.alerts import tasks as alert_tasks
from regions.drills import tasks as drill_tasks
from regions.loop.tasks import purge_history, purge_history_now, tick
from trafficmgr.celery import app

HISTORY_PURGE_EVERY_S = 3600.0

__all__ = ["beat_schedule", "purge_history", "purge_history_now", "tick"]


def beat_schedule() -> dict[str, dict[str, Any]]:
    interval = conf.tick_seconds()
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
        **drill_tasks.beat_schedule(),
        **alert_tasks.beat_schedule(),
    }


app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **beat_schedule()}
