from __future__ import annotations

from django.apps import AppConfig


class RegionsConfig(AppConfig):
    name = "regions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Signal handlers (audit trail, token cache) and system checks register on import.
        from regions import checks  # noqa: F401
        from regions.access import auth  # noqa: F401
        from regions.audit import trail  # noqa: F401
        from regions.drills.service import rollback_dangling_drills
        from regions.loop import control
        from trafficmgr import celery  # noqa: F401  the configured app, current for shared tasks

        # The loop restores the faults of drills whose runner died, before its first tick.
        control.on_first_tick(rollback_dangling_drills)
