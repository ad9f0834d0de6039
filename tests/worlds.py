"""The named fleets the tests run on, kept in ``trafficmgr.testing.worlds`` (built with
``trafficmgr.testing.fleets``) so the benchmarks can run on them too."""

from __future__ import annotations

from trafficmgr.testing.worlds import (
    CLUSTER,
    DRILL,
    EEA_SETS,
    FAST_FAILOVER,
    GATEWAY,
    GDPR,
    GDPR_SHORT,
    ONE_ENDPOINT,
    PAIR,
    SIM,
    SIM_LAB,
    WORLD,
)

__all__ = [
    "CLUSTER",
    "DRILL",
    "EEA_SETS",
    "FAST_FAILOVER",
    "GATEWAY",
    "GDPR",
    "GDPR_SHORT",
    "ONE_ENDPOINT",
    "PAIR",
    "SIM",
    "SIM_LAB",
    "WORLD",
]
