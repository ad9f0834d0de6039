"""When the control plane itself was impaired, the loop keeps its last decision, for a while.

Heartbeats that the control plane refused for its own reasons (database or Redis away), or
that Redis lost in a restart, are silence the agents did not cause. Reading that silence as
endpoints failing would take healthy regions down and send them through slow start: the
control plane failing would look like the fleet failing. So while such a spell is recent
the loop holds: it evaluates nothing, changes no machine, writes no event and leaves the
published table as it is (republishing it where Redis lost it). It resumes once agents had
the time to report again: ``miss_threshold x heartbeat_interval_s`` plus ``RETRY_S`` (the
agents' longest wait between retries) after the spell's last refused heartbeat.

A genuine failure during the spell is acted on when the hold ends, at most that much later.

The hold is capped (``regions.conf.loop_hold_max_s``, 300 s by default): a web process that
keeps failing, or spells that keep following each other within the grace, would otherwise
keep the loop blind for as long as they last. Once the loop has held for the cap without a
break, it acts on what it sees again, impairment or not; a break in the spells (a grace with
none) starts the count over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from regions.conf import loop_hold_max_s
from trafficmgr.routing.types import FailoverPolicy

log = logging.getLogger(__name__)

# The longest an agent waits between two tries while the control plane refuses it (the
# agent's backoff cap, ``agents.push.Pusher``, at a 1 s heartbeat interval).
RETRY_S = 2.0

_capped_since: float | None = None  # the start of the hold run the cap last ended (logged once)


def grace_s(policy: FailoverPolicy) -> float:
    """How long after a spell's end the loop still holds."""
    return policy.heartbeat_interval_s * policy.miss_threshold + RETRY_S


def holding(
    spells: Iterable[tuple[float, float]],
    policy: FailoverPolicy,
    now: float,
    max_s: float | None = None,
) -> tuple[float, float] | None:
    """The spell the loop holds for at ``now``, if any (the latest ending one).

    None as well once the loop has held for ``max_s`` (default: the setting) without a break.
    """
    global _capped_since
    grace = grace_s(policy)
    spells = list(spells)
    recent = [s for s in spells if s[0] <= now and s[1] + grace > now]
    if not recent:
        return None
    cap = loop_hold_max_s() if max_s is None else max_s
    if cap > 0:
        since = held_since(spells, recent, grace)
        if now - since >= cap:
            if _capped_since != since:
                _capped_since = since
                log.warning(
                    "the loop has held since %.3f, over its %g s cap: acting on what it sees",
                    since,
                    cap,
                )
            return None
    return max(recent, key=lambda s: s[1])


def held_since(
    spells: list[tuple[float, float]], recent: list[tuple[float, float]], grace: float
) -> float:
    """When the run of holds that ``recent`` belongs to began: the earliest start of spells
    that follow each other with less than ``grace`` between one's end and the next's start."""
    since = min(s[0] for s in recent)
    earlier = sorted((s for s in spells if s[0] < since), key=lambda s: s[1], reverse=True)
    for start, end in earlier:  # latest ending first: each can only pull ``since`` back
        if end + grace >= since:
            since = min(since, start)
    return since
