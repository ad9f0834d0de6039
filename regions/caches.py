"""One reset for every process-wide cache of the app (tests, and a process that must start over).

A process keeps several caches for speed: the hot-state store it talks to, the fleet view it
routes over, the per-region pickers and what they learned, the last table the loop recorded,
the token principals, the loop's rate-limit windows. Each owner has its own ``forget``; this
module is the one place that knows them all, so a test cannot leave one behind.
"""

from __future__ import annotations

from regions import hotstate
from regions.access import auth
from regions.api.throttling import LoopRateThrottle, cache_away
from regions.decisions import route
from regions.fleet import snapshot
from regions.hotstate import HotState, impairment
from regions.loop import history


def reset_process_state(store: HotState | None = None) -> None:
    """Use ``store`` as the hot state (None: the configured one) and empty every cache."""
    hotstate.use(store)
    snapshot.forget()
    route.forget()
    history.forget()
    auth.cache.clear()
    impairment.database.succeeded()
    cache_away.succeeded()
    impairment.forget()
    LoopRateThrottle._windows.clear()
