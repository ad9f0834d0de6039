"""The app's settings, read in one typed place.

``trafficmgr/settings.py`` reads the environment once into ``settings.TRAFFICMGR``; app code
asks here instead of spelling keys and defaults itself. Each reader looks at the settings at
call time, so tests that override them (or set an environment variable the settings fall
back to) are seen. The variables a running process may be handed after start-up (drill
vantage points and schedule, given by the process that starts a worker) fall back to the
environment.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings

from trafficmgr.runtime.env import env_bool


def _conf() -> dict[str, Any]:
    return dict(getattr(settings, "TRAFFICMGR", {}) or {})


def tick_seconds() -> float:
    """Seconds between control-loop ticks (``TRAFFICMGR_TICK_SECONDS``, default 1)."""
    return float(_conf().get("TICK_SECONDS", 1.0))


def geoip_db() -> str | None:
    """Path of the GeoIP database (``TRAFFICMGR_GEOIP_DB``); None: the bundled one."""
    return str(_conf().get("GEOIP_DB") or "") or None


def fleet_file() -> str:
    """The fleet file the demo applies (``TRAFFICMGR_FLEET_FILE``)."""
    return str(_conf().get("FLEET_FILE") or "")


def heartbeat_retention_days() -> float:
    """Days of heartbeat history and table versions kept (``..._HEARTBEAT_RETENTION_DAYS``)."""
    return float(_conf().get("HEARTBEAT_RETENTION_DAYS", 7))


def metrics_token() -> str:
    """Bearer token /metrics requires (``TRAFFICMGR_METRICS_TOKEN``); empty: open."""
    return str(_conf().get("METRICS_TOKEN") or "")


def drill_dns() -> str:
    """Where drills ask DNS (``TRAFFICMGR_DRILL_DNS``, default 127.0.0.1:5353)."""
    return str(
        _conf().get("DRILL_DNS") or os.environ.get("TRAFFICMGR_DRILL_DNS") or "127.0.0.1:5353"
    )


def drill_http() -> str | None:
    """The control plane's base URL for drills' route probes (``TRAFFICMGR_DRILL_HTTP``)."""
    return str(_conf().get("DRILL_HTTP") or os.environ.get("TRAFFICMGR_DRILL_HTTP") or "") or None


def drill_schedule() -> str:
    """Scheduled practice drills, ``target:kind:duration_s:every_s,...``."""
    return str(_conf().get("DRILL_SCHEDULE") or os.environ.get("TRAFFICMGR_DRILL_SCHEDULE", ""))


def loop_front_enabled() -> bool:
    """Whether the ASGI front serves the hot paths (``TRAFFICMGR_LOOP_FRONT``, default on)."""
    return env_bool("TRAFFICMGR_LOOP_FRONT", True)


def loop_hold_max_s() -> float:
    """Longest the loop holds its decision over the control plane's own impairment
    (``TRAFFICMGR_LOOP_HOLD_MAX_S``, default 300; 0: no cap); see ``regions.loop.hold``."""
    raw = _conf().get("LOOP_HOLD_MAX_S")
    if raw is None or raw == "":
        raw = os.environ.get("TRAFFICMGR_LOOP_HOLD_MAX_S") or 300.0
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"TRAFFICMGR_LOOP_HOLD_MAX_S={raw!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"TRAFFICMGR_LOOP_HOLD_MAX_S={raw!r}: give 0 (no cap) or more seconds")
    return value


# The hot state's default timeout (``hotstate_timeout_s``), also used where no settings are read.
HOTSTATE_TIMEOUT_DEFAULT_S = 1.0


def hotstate_timeout_s() -> float:
    """Seconds the hot state's Redis client waits to connect or for a reply on request paths
    (``TRAFFICMGR_HOTSTATE_TIMEOUT_S``, default 1); see ``regions.hotstate.redis_client``."""
    raw = _conf().get("HOTSTATE_TIMEOUT_S")
    if raw is None or raw == "":
        raw = os.environ.get("TRAFFICMGR_HOTSTATE_TIMEOUT_S") or HOTSTATE_TIMEOUT_DEFAULT_S
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(
            f"TRAFFICMGR_HOTSTATE_TIMEOUT_S={raw!r} is not a number of seconds"
        ) from None
    if not 0 < value <= 60:
        raise ValueError(f"TRAFFICMGR_HOTSTATE_TIMEOUT_S={raw!r}: give more than 0, at most 60 s")
    return value


def _alerts_number(key: str, default: float) -> float:
    """Read ``TRAFFICMGR["ALERTS_<key>"]`` or ``TRAFFICMGR_ALERTS_<key>``: a positive number."""
    name = f"ALERTS_{key}"
    raw = _conf().get(name)
    if raw is None or raw == "":
        raw = os.environ.get(f"TRAFFICMGR_{name}") or default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"TRAFFICMGR_{name}={raw!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"TRAFFICMGR_{name}={raw!r}: give a number above 0")
    return value


def alerts_every_s() -> float:
    """Seconds between runs of the alert worker (``TRAFFICMGR_ALERTS_EVERY_S``, default 2)."""
    return _alerts_number("EVERY_S", 2.0)


def alerts_timeout_s() -> float:
    """Seconds one delivery attempt may take (``TRAFFICMGR_ALERTS_TIMEOUT_S``, default 5)."""
    return _alerts_number("TIMEOUT_S", 5.0)


def alerts_max_attempts() -> int:
    """Delivery attempts before a notification fails (``..._ALERTS_MAX_ATTEMPTS``, 5)."""
    return int(_alerts_number("MAX_ATTEMPTS", 5))


def alerts_retry_base_s() -> float:
    """The first retry's delay, doubled at each next one (``..._ALERTS_RETRY_BASE_S``, 2)."""
    return _alerts_number("RETRY_BASE_S", 2.0)


def alerts_group_s() -> float:
    """Repeats of one alert within this many seconds are one notification (default 300)."""
    return _alerts_number("GROUP_S", 300.0)


def alerts_escalate_after_s() -> float:
    """A page nobody acknowledged in this many seconds escalates (default 900)."""
    return _alerts_number("ESCALATE_AFTER_S", 900.0)


def alerts_watchdog_url() -> str:
    """Where the alert worker reports that it is alive (``TRAFFICMGR_ALERTS_WATCHDOG_URL``,
    e.g. a Healthchecks check's ping URL); empty: nowhere."""
    return str(
        _conf().get("ALERTS_WATCHDOG_URL") or os.environ.get("TRAFFICMGR_ALERTS_WATCHDOG_URL") or ""
    )


def alerts_watchdog_every_s() -> float:
    """Seconds between the alert worker's watchdog pings (default 60)."""
    return _alerts_number("WATCHDOG_EVERY_S", 60.0)
