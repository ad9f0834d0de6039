"""Celery tasks of the control loop: thin wrappers over the tick and the history purge.

The task names are pinned (``regions.tasks.tick``, ``regions.tasks.purge_history``): beat
schedules and running workers of an older release refer to them by name.
"""

from __future__ import annotations

import time
from typing import Any

from celery import shared_task

from regions.loop import control
from regions.loop.retention import purge_history_now


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
