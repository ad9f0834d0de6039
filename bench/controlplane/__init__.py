"""Control plane benchmarks: the tick, ingest and route over HTTP, drills, faults, the dashboard."""
