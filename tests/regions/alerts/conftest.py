"""Fixtures of the alerts tests: the loop's world and heartbeat feed, channels, the worker."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from tests.regions.loop.conftest import (  # noqa: F401 (fixtures)
    agent_tokens,
    feed,
    fresh_hot_state,
    loop_world,
    plain_http,
)

T0 = 1_800_000_000.0


def at(seconds: float) -> dt.datetime:
    """The instant ``seconds`` after T0, as the alert worker takes it."""
    return dt.datetime.fromtimestamp(T0 + seconds, tz=dt.UTC)


@pytest.fixture
def channel(db: None) -> Callable[..., Any]:
    """``channel("ops", url=...)``: store an enabled webhook channel taking warnings and up."""
    from regions.models import AlertChannel

    def make(name: str, **fields: Any) -> Any:
        fields.setdefault("kind", "webhook")
        fields.setdefault("min_severity", "warning")
        return AlertChannel.objects.create(name=name, **fields)

    return make


@pytest.fixture(autouse=True)
def _fast_retries(settings: Any) -> None:
    """Retries 1 s, 2 s, 4 s ... apart and a short timeout: the tests move ``now`` themselves."""
    settings.TRAFFICMGR = {
        **settings.TRAFFICMGR,
        "ALERTS_RETRY_BASE_S": 1,
        "ALERTS_TIMEOUT_S": 2,
        "ALERTS_MAX_ATTEMPTS": 4,
    }


def run(seconds: float) -> dict[str, int]:
    """One pass of the alert worker at T0 + ``seconds``."""
    from regions.alerts.service import run_once

    return run_once(at(seconds))
