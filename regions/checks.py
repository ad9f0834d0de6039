"""System checks that name a misconfiguration before it bites."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from regions import conf
from regions.drills.tasks import parse_schedule


@register()
def trafficmgr_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check trafficmgr's own settings."""
    problems: list[CheckMessage] = []
    values = settings.TRAFFICMGR
    geoip = values.get("GEOIP_DB")
    if geoip and not os.path.isfile(geoip):  # type: ignore[arg-type]
        problems.append(
            Error(
                f"TRAFFICMGR_GEOIP_DB={geoip!r} does not exist",
                hint="Point it at a GeoLite2/GeoIP2 City or Country .mmdb file, "
                "or unset it to use the bundled GeoLite2 database.",
                id="trafficmgr.E001",
            )
        )
    if values.get("TICK_SECONDS", 1.0) <= 0:  # type: ignore[operator]
        problems.append(Error("TRAFFICMGR_TICK_SECONDS must be > 0", id="trafficmgr.E002"))
    schedule = conf.drill_schedule()
    if schedule:
        try:
            parse_schedule(schedule)
        except ValueError as exc:
            problems.append(Error(f"TRAFFICMGR_DRILL_SCHEDULE: {exc}", id="trafficmgr.E003"))
    engine = settings.DATABASES["default"]["ENGINE"]
    if settings.REDIS_URL and engine.endswith("sqlite3"):  # type: ignore[attr-defined]
        problems.append(
            Warning(
                "REDIS_URL is set but the database is SQLite; the distributed "
                "mode expects DATABASE_URL to point at PostgreSQL",
                id="trafficmgr.W001",
            )
        )
    return problems
