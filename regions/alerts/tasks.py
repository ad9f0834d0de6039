"""Where the alert worker runs: a Celery task on beat, or a thread in the embedded demo.

The task name is pinned (``regions.alerts.run``): beat schedules refer to it by name. Each
run expires after one interval, so a backlog behind a slow receiver is dropped, not stacked.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from django.db import close_old_connections, connection

from regions import conf
from regions.alerts import service

log = logging.getLogger(__name__)


@shared_task(name="regions.alerts.run", ignore_result=True, soft_time_limit=120)
def run() -> dict[str, int]:
    """Make one pass of the alert worker now."""
    return service.run_once()


def beat_schedule() -> dict[str, dict[str, Any]]:
    every = conf.alerts_every_s()
    return {
        "trafficmgr-alerts": {
            "task": "regions.alerts.run",
            "schedule": every,
            "options": {"expires": max(every, 1.0)},
        }
    }


class AlertWorker:
    """Run the alert worker from a thread of its own: the embedded demo's notifier."""

    def __init__(self, every_s: float | None = None) -> None:
        self.every_s = every_s if every_s is not None else conf.alerts_every_s()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> AlertWorker:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="trafficmgr-alerts", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                close_old_connections()
                try:
                    service.run_once()
                except Exception:
                    log.exception("alert worker pass failed")
        finally:
            connection.close()
