"""The shared request-path state's settings (``store``): where it lives, how fresh it is kept."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from trafficmgr.contracts import PREFIX

DEFAULT_INTERVAL_S = 0.005
DEFAULT_STALENESS_S = 1.0


@dataclass(frozen=True, slots=True)
class SharingConfig:
    """Where the shared state lives and how fresh it is kept."""

    url: str
    prefix: str = PREFIX
    interval_s: float = DEFAULT_INTERVAL_S  # publish and merge at least this often ...
    every_requests: int = 32  # ... or after this many decisions, whichever comes first
    lease_s: float = 2.0  # a silent process's part expires after this long
    max_staleness_s: float = DEFAULT_STALENESS_S  # parts older than this are not merged
    blocks_ttl_s: float = 600.0  # prompt blocks older than this are trimmed from the stream
    timeout_s: float = 0.25  # a Redis call gives up after this long
    retry_s: float = 1.0  # after a failure, Redis is tried again this much later


def add_sharing_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags that turn the shared state on and tune it (``sharing_from``)."""
    parser.add_argument(
        "--shared-state",
        metavar="REDIS_URL",
        help="share in-flight work, prompt blocks and ejections with the other processes "
        "through this Redis (default: $REDIS_URL; none: each process decides alone)",
    )
    parser.add_argument(
        "--no-shared-state", action="store_true", help="decide alone even when $REDIS_URL is set"
    )
    parser.add_argument(
        "--shared-staleness",
        type=float,
        default=DEFAULT_STALENESS_S,
        help="seconds after which the other processes' figures are not trusted",
    )
    parser.add_argument(
        "--shared-interval-ms",
        type=float,
        default=DEFAULT_INTERVAL_S * 1000,
        help="publish and merge at least this often (milliseconds)",
    )


def sharing_from(options: Mapping[str, Any], environ: Mapping[str, str]) -> SharingConfig | None:
    """Return the sharing settings the flags (or ``REDIS_URL``) ask for; raise ValueError."""
    if options.get("no_shared_state"):
        return None
    url = options.get("shared_state") or environ.get("REDIS_URL", "")
    if not url:
        return None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"--shared-state: expected a redis:// URL, got {url!r}")
    staleness = float(options.get("shared_staleness", DEFAULT_STALENESS_S))
    interval = float(options.get("shared_interval_ms", DEFAULT_INTERVAL_S * 1000)) / 1000
    if not 0 < staleness <= 60:
        raise ValueError(f"--shared-staleness: expected 0 < seconds <= 60, got {staleness}")
    if not 0 < interval <= staleness:
        raise ValueError(f"--shared-interval-ms: expected 0 < it <= the staleness, got {interval}")
    return SharingConfig(url, max_staleness_s=staleness, interval_s=interval)


class Sharing(Protocol):
    """What a front reports of the shared state (``store.SharedState``)."""

    def status(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...
