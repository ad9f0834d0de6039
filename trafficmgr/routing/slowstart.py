"""Slow start for endpoints: one that joins or comes back ramps up instead of taking all at once.

An endpoint back from an outage is idle, so every load-aware picker sees it as the cheapest
and sends it everything until its first heartbeat under load says otherwise: seconds during
which it swings between a third and all of the picks, with a cold cache. So an endpoint that
joins, returns from an outage or an ejection, or becomes eligible again ramps from ``floor``
to its full share over ``slow_start_s`` (Envoy's linear ramp, aggression 1): each pick offers
it to the picker with that probability (``offered``). Slow start never refuses a request: when
the draw leaves nothing to offer, the ramping endpoints are offered after all.

The gateway and the Envoy endpoint picker (``requestpath``) know when an endpoint came back
from their own view of the fleet; ``POST /api/v1/route`` from the control loop's record of
each endpoint's health (``health_since``, kept in the loop's evaluation) and its own verdict
on the latest heartbeat (``serving_since``). Both call the rules here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

DEFAULT_FLOOR = 0.1  # Envoy's min_weight_percent default


def ramp(elapsed_s: float, slow_start_s: float, floor: float = DEFAULT_FLOOR) -> float:
    """Return the share (``floor``..1) of its traffic an endpoint may take ``elapsed_s`` after
    it became eligible."""
    if slow_start_s <= 0.0 or elapsed_s >= slow_start_s:
        return 1.0
    return max(floor, elapsed_s / slow_start_s)


def offered(
    full: Sequence[T], ramping: Sequence[tuple[float, T]], draw: Callable[[], float]
) -> list[T]:
    """Return the endpoints to offer the picker: ``full`` ones, and each ramping one with
    its share's probability (``draw`` gives points in [0, 1)); all ramping ones if none."""
    out = list(full)
    for share, item in ramping:
        if draw() < share:
            out.append(item)
    if not out:
        out = [item for _, item in ramping]
    return out


def health_since(
    was_healthy: bool | None, was_since: float | None, healthy: bool, now: float
) -> float | None:
    """Return since when an endpoint has had its current health, for the loop's record.

    ``was_healthy`` is None for an endpoint the previous record did not hold (it joined:
    ``now``); a flip starts a new period at ``now``; otherwise the old start holds (None: it
    has been so since before the first record, and does not ramp).
    """
    if was_healthy is None or was_healthy != healthy:
        return now
    return was_since


def serving_since(
    recorded_healthy: bool | None, recorded_since: float | None, healthy: bool, now: float
) -> float | None:
    """Return since when an endpoint healthy now has been serving, as a decision sees it.

    From the loop's record (None when there is none yet: no ramp) and the decision's own
    verdict on the latest heartbeat: healthy now while the record says down means it is
    coming back right now, before the loop has noticed.
    """
    if not healthy or recorded_healthy is None:
        return None
    if not recorded_healthy:
        return now
    return recorded_since
