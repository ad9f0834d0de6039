from __future__ import annotations

from django.apps import AppConfig


class RegionsConfig(AppConfig):
    name = "regions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Signal handlers (audit trail, token cache) and system checks.
        from regions import audit, auth, checks  # noqa: F401
