"""Celery tasks of the control loop: thin wrappers over the tick and the history purge.

The task names are pinned (``regions.tasks.tick``, ``regions.tasks.purge_history``): beat
schedules and running workers of an older release refer to them by name.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init
from django.db import connections

from regions.fleet import snapshot
from regions.loop import control
from regions.loop.retention import purge_history_now

log = logging.getLogger(__name__)


@worker_process_init.connect
def _read_the_fleet_at_start(**kwargs: object) -> None:
    """Read the fleet view when a worker process starts, so that a database outage later
    finds it with a view to keep (fail static) even before its first tick."""
    try:
        snapshot.current()
    except Exception:  # the database is away now: the first tick reads it
        log.warning("could not read the fleet view at worker start", exc_info=True)
    finally:
        # Celery's Django fixup closes the file descriptor of any connection still open in a
        # new worker process; one handed back here goes to the pool (or away) untouched.
        connections.close_all()


@shared_task(name="regions.tasks.tick", ignore_result=True)
def tick() -> dict[str, Any]:
    """Run one control-loop tick now (skipped when another is running)."""
    result = control.run_tick(time.time(), keep_heap=True)
    return {
        "ran": result.ran,
        "version": result.version,
        "changed": result.changed,
        "duration_s": result.duration_s,
        "overran": result.overran,
    }


@shared_task(name="regions.tasks.purge_history", ignore_result=True)
def purge_history() -> dict[str, int]:
    """Delete history older than ``TRAFFICMGR["HEARTBEAT_RETENTION_DAYS"]``."""
    return purge_history_now(time.time())
