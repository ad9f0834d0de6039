"""The request path's knobs, in one frozen value a front builds once.

Defaults follow the anchors where they have one (Envoy's outlier detection: 5 consecutive
failures, an ejection time growing with each ejection, a bounded share of the pool ejected;
Envoy's slow start with a 10 % floor) and the engine's own rules otherwise (the picker's
80 % batch threshold; ``/route``'s 0.5 s load cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trafficmgr.requestpath.shared.config import SharingConfig
from trafficmgr.requestpath.tokens import TokenLimits
from trafficmgr.routing.picker import DEFAULT_STRATEGY


@dataclass(frozen=True, slots=True)
class RequestPathConfig:
    """How the request-path core routes, admits and ejects."""

    region: str | None = None  # serve this region only (a regional gateway or picker)
    default_strategy: str = DEFAULT_STRATEGY
    loads_ttl_s: float = 0.5  # heartbeats and the table are read again this often
    max_targets: int = 4  # the pick and up to this many minus one fallbacks
    # admission: requests in flight per serving slot an endpoint may reach, per priority
    max_load: float = 1.5
    batch_max_load: float = 0.8
    queue_limit: int = 1024  # requests waiting for admission, both priorities
    interactive_wait_s: float = 5.0
    batch_wait_s: float = 2.0
    retry_after_s: int = 1
    # session affinity: consistent hashing with bounded load (Mirrokni et al., 2018)
    affinity_load_factor: float = 1.25
    # outlier detection (Envoy's consecutive failures, growing ejection, bounded share)
    consecutive_failures: int = 5
    base_ejection_s: float = 10.0
    max_ejection_s: float = 300.0
    max_ejected_share: float = 0.5  # of the endpoints in scope; at least one may always go
    # slow start after an endpoint joins or returns; None: the fleet's failover.slow_start_s
    slow_start_s: float | None = None
    slow_start_floor: float = 0.1
    # prompt blocks remembered per endpoint (approximate prefix-cache index)
    prefix_blocks_per_endpoint: int = 4096
    # per model, the models to try, in order, when none of its endpoints can take a request
    model_fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    auth_ttl_s: float = 5.0  # a token's answer is cached this long (revocation delay)
    auth_negative_ttl_s: float = 1.0
    # cache sizes, lookups in flight, failures per client (``tokens``); the TTLs above win
    token_limits: TokenLimits = field(default_factory=TokenLimits)
    report_batch: int = 1000  # completions reported per source call
    # the state shared with the other processes (``shared``); None: this process decides alone
    sharing: SharingConfig | None = None
