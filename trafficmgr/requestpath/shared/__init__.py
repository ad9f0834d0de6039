"""The request path's shared state: N processes deciding as one (see ``store``).

Every gateway worker and endpoint-picker replica configured with a Redis URL publishes its
in-flight work, prompt blocks, ejections and slow-start ramps, and merges the others'
(``store.SharedState``); the merge itself is the engine's pure ``routing.sharedstate``, which
the simulator runs too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trafficmgr.requestpath.shared.config import Sharing

if TYPE_CHECKING:
    from trafficmgr.requestpath.core import RequestPath


def start_sharing(core: RequestPath) -> Sharing | None:
    """Start sharing ``core``'s state when its config asks for it (one merge first: warm).

    The Redis client is imported only then: redis-py loads OpenTelemetry's SDK on import,
    which a process that neither shares nor traces should not pay for.
    """
    if core.config.sharing is None:
        return None
    from trafficmgr.requestpath.shared.store import SharedState

    shared = SharedState(core, core.config.sharing)
    shared.start()
    return shared
