"""Alerts on the control loop itself, which records no event for them.

``tick_overrun``: ticks took longer than their interval since the last look (the loop's
overrun counter moved). ``loop_stalled``: no tick has run for ``STALL_INTERVALS`` intervals
(at least ``STALL_MIN_S``): nothing decides, every other alert is silent, so it is a page.
Both are read from the hot state the tick writes, as ``/metrics`` reads them.
"""

from __future__ import annotations

import datetime as dt
import logging

from regions import conf, hotstate
from regions.alerts.rules import Alert
from regions.metrics import TICKS
from regions.models import Severity
from trafficmgr.contracts import TICK_LAST_AT, counter_field

log = logging.getLogger(__name__)

OVERRAN = counter_field(TICKS, {"result": "overran"})
STALL_INTERVALS = 10
STALL_MIN_S = 30.0


def loop_figures() -> tuple[float, float | None] | None:
    """Return the loop's overrun count and its last tick's time, or None if unreadable."""
    try:
        store = hotstate.get()
        counters, info = store.counters(), store.tick_info()
    except Exception:  # the hot state is away: the store outage has alerts of its own
        log.warning("alerts: cannot read the loop's figures", exc_info=True)
        return None
    return float(counters.get(OVERRAN, 0.0)), info.get(TICK_LAST_AT)


def overrun_alert(overran: float, seen: float) -> Alert | None:
    """Return the alert for ticks that overran since the count ``seen`` (None: none did)."""
    if overran <= seen:
        return None
    count = int(overran - seen) if seen else int(overran)
    interval = conf.tick_seconds()
    summary = f"{count} control-loop tick(s) took longer than the {interval:g} s interval"
    return Alert("tick_overrun", Severity.WARNING, "tick_overrun", "", "", summary)


def stall_alert(last_at: float | None, now: dt.datetime) -> Alert | None:
    """Return the alert for a loop whose last tick is too old (None: it is ticking)."""
    if not last_at:
        return None  # no tick yet: nothing to compare
    age = now.timestamp() - float(last_at)
    if age <= max(STALL_MIN_S, STALL_INTERVALS * conf.tick_seconds()):
        return None
    summary = f"no control-loop tick for {age:.0f} s: routing decisions are frozen"
    return Alert("loop_stalled", Severity.CRITICAL, "loop_stalled", "", "", summary)
