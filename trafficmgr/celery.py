"""Celery application; the control loop's tasks live in regions.tasks."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")

app = Celery("trafficmgr")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
