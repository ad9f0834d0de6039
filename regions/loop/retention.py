"""How long history is kept: heartbeat samples and table versions past the retention go."""

from __future__ import annotations

import datetime as dt

from regions import conf
from regions.loop import heartbeat_history
from regions.models import RoutingTableVersion


def purge_history_now(now: float) -> dict[str, int]:
    """Delete heartbeat samples and table versions older than the retention (keep the head)."""
    days = conf.heartbeat_retention_days()
    samples = heartbeat_history.purge_history(now, days)
    cutoff = dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=days)
    head = RoutingTableVersion.objects.values_list("pk", flat=True).first()
    versions, _ = (
        RoutingTableVersion.objects.filter(generated_at__lt=cutoff).exclude(pk=head).delete()  # type: ignore[misc]
    )
    return {"heartbeat_samples": samples, "table_versions": versions}
