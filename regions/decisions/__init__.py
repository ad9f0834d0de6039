"""The per-request decision of `POST /api/v1/route`: a thin adapter around the engine's
`routing.decision` (the fleet view, the published table, heartbeats, what the pickers learn
from reported completions)."""
