from __future__ import annotations

from django.apps import AppConfig


class RegionsConfig(AppConfig):
    name = "regions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from regions import audit, checks  # noqa: F401  (signal handlers and system checks)
