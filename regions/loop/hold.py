"""When the control plane itself was impaired, the loop keeps its last decision.

Heartbeats that the control plane refused for its own reasons (database or Redis away), or
that Redis lost in a restart, are silence the agents did not cause. Reading that silence as
endpoints failing would take healthy regions down and send them through slow start: the
control plane failing would look like the fleet failing. So while such a spell is recent
the loop holds: it evaluates nothing, changes no machine, writes no event and leaves the
published table as it is (republishing it where Redis lost it). It resumes once agents had
the time to report again: ``miss_threshold x heartbeat_interval_s`` plus ``RETRY_S`` (the
agents' longest wait between retries) after the spell's last refused heartbeat.

A genuine failure during the spell is acted on when the hold ends, at most that much later.
"""

from __future__ import annotations

from collections.abc import Iterable

from trafficmgr.routing.types import FailoverPolicy

# The longest an agent waits between two tries while the control plane refuses it (the
# agent's backoff cap, ``agents.push.Pusher``, at a 1 s heartbeat interval).
RETRY_S = 2.0


def grace_s(policy: FailoverPolicy) -> float:
    """How long after a spell's end the loop still holds."""
    return policy.heartbeat_interval_s * policy.miss_threshold + RETRY_S


def holding(
    spells: Iterable[tuple[float, float]], policy: FailoverPolicy, now: float
) -> tuple[float, float] | None:
    """The spell the loop holds for at ``now``, if any (the latest ending one)."""
    grace = grace_s(policy)
    recent = [s for s in spells if s[0] <= now and s[1] + grace > now]
    return max(recent, key=lambda s: s[1], default=None)
