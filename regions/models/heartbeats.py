"""Models of the control loop: downsampled heartbeat history; config-change signals."""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from regions import hotstate
from regions.models.access import AgentToken
from regions.models.fleet import (
    Endpoint,
    FailoverPolicy,
    FleetSettings,
    GpuProfile,
    Region,
    ResidencyRule,
)

__all__ = ["HeartbeatSample"]


class HeartbeatSample(models.Model):
    """One endpoint's first accepted heartbeat of a history bucket (10 s by default)."""

    endpoint = models.ForeignKey(
        Endpoint, on_delete=models.CASCADE, related_name="heartbeat_samples"
    )
    bucket = models.BigIntegerField(help_text="start of the bucket, seconds since the epoch")
    received_at = models.DateTimeField(db_index=True)
    seq = models.BigIntegerField()
    gpus = models.PositiveSmallIntegerField(default=0)
    gpu_util_pct = models.FloatField(default=0.0, help_text="mean over the GPUs")
    mem_used_mb = models.FloatField(default=0.0, help_text="sum over the GPUs")
    mem_total_mb = models.FloatField(default=0.0, help_text="sum over the GPUs")
    temp_c_max = models.FloatField(default=0.0)
    power_w = models.FloatField(default=0.0, help_text="sum over the GPUs")
    ecc_errors = models.PositiveIntegerField(default=0)
    xid_errors = models.PositiveIntegerField(default=0)
    throttled_gpus = models.PositiveSmallIntegerField(default=0)
    requests_running = models.PositiveIntegerField(null=True, blank=True)
    requests_waiting = models.PositiveIntegerField(null=True, blank=True)
    kv_cache_usage = models.FloatField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)
    ttft_p99_ms = models.FloatField(null=True, blank=True)
    probe_ok = models.BooleanField(null=True, blank=True)
    probe_latency_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "bucket"], name="heartbeat_sample_one_per_bucket"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint_id}@{self.bucket}"


_CONFIG_MODELS: tuple[type[models.Model], ...] = (
    FleetSettings,
    GpuProfile,
    Region,
    Endpoint,
    ResidencyRule,
    FailoverPolicy,
    AgentToken,
)


def _config_changed(**kwargs: Any) -> None:
    """Bump the config version now and once the write commits, so fleet caches reload.

    The bump at commit matters: a reader between the two may have cached the old rows.
    """
    if kwargs.get("raw"):
        return
    hotstate.get().bump_config_version()
    transaction.on_commit(lambda: hotstate.get().bump_config_version())


for _model in _CONFIG_MODELS:
    post_save.connect(
        _config_changed, sender=_model, dispatch_uid=f"config-version-save-{_model.__name__}"
    )
    post_delete.connect(
        _config_changed, sender=_model, dispatch_uid=f"config-version-del-{_model.__name__}"
    )
m2m_changed.connect(
    _config_changed, sender=ResidencyRule.regions.through, dispatch_uid="config-version-m2m-rr"
)
m2m_changed.connect(
    _config_changed, sender=AgentToken.endpoints.through, dispatch_uid="config-version-m2m-at"
)
