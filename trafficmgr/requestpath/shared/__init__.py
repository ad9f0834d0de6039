"""The request path's shared state: N processes deciding as one (see ``store`` and ``merge``).

Every gateway worker and endpoint-picker replica configured with a Redis URL publishes its
in-flight work, prompt blocks, ejections and slow-start ramps, and merges the others'
(``SharedState``); ``merge`` is the pure part the simulator runs too.
"""

from __future__ import annotations
