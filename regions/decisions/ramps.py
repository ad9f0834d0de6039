"""The control loop's record of each endpoint's health, for ``POST /api/v1/route``'s slow start.

The rules are the engine's (``routing.slowstart``), applied by the request path's core: an
endpoint back from an outage takes from the floor to all of its share over the fleet's
``slow_start_s``. A ``/route`` process did not see the endpoints go down, so when each came
back is the control loop's record (``since`` per endpoint in the stored evaluation); one this
process judges healthy while the record says down is coming back now.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from regions import hotstate

log = logging.getLogger(__name__)


def recorded_health() -> Mapping[str, Any]:
    """Return the control loop's last record of each endpoint's health ({} when unreadable)."""
    try:
        endpoints = hotstate.get().evaluation().get("endpoints")
    except Exception:
        log.warning("reading the loop's evaluation failed", exc_info=True)
        return {}
    return endpoints if isinstance(endpoints, dict) else {}
