"""What every hot-state store offers, split by concern, and the rules they share.

A caller names the concern it needs (``HeartbeatStore``, ``TableStore``, ...); ``HotState`` is
all of them, what ``regions.hotstate.get`` returns. Two adapters implement it:
``regions.hotstate.memory`` (one process: the embedded demo and the tests) and
``regions.hotstate.redis_store`` (every process of the distributed mode).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trafficmgr.contracts import Completion, StreamEntry
from trafficmgr.routing.failover import RegionMachine
from trafficmgr.routing.types import Heartbeat, RoutingTable


@dataclass(frozen=True, slots=True)
class PutResult:
    accepted: bool
    new_bucket: bool  # first accepted heartbeat of this history bucket: store a sample
    drill: dict[str, Any] | None = None  # a pending drill instruction, taken with the beat


# One heartbeat to compare and set: the beat, its history bucket, the agent's running counts.
HeartbeatPut = tuple[Heartbeat, int, Mapping[str, list[int]] | None]

RESTART_GAP_S = 2.0


def is_newer(seq: int, sent_at: float, old_seq: int, old_sent_at: float) -> bool:
    """Tell whether a heartbeat supersedes the stored one.

    A higher seq wins. A lower or equal seq wins only when it was sent at least
    ``RESTART_GAP_S`` later: the agent restarted and counts from zero again. Replays and
    out-of-order deliveries are neither, so they lose.
    """
    return seq > old_seq or sent_at >= old_sent_at + RESTART_GAP_S


class HeartbeatStore(Protocol):
    """Latest heartbeat per endpoint, compared and set by sequence."""

    def put_heartbeat(
        self, hb: Heartbeat, bucket: int, totals: Mapping[str, list[int]] | None = None
    ) -> PutResult: ...
    def put_heartbeats(self, items: Sequence[HeartbeatPut]) -> list[PutResult]: ...
    def error_totals(self, endpoint: str) -> dict[str, list[int]]: ...
    def heartbeats(
        self, names: Iterable[str] | None = None, histograms: bool = True
    ) -> dict[str, Heartbeat]: ...


class LoopStateStore(Protocol):
    """What the control loop carries from tick to tick, and the lock making ticks one at a time."""

    def machines(self) -> dict[str, RegionMachine]: ...
    def set_machines(self, machines: Mapping[str, RegionMachine]) -> None: ...
    def evaluation(self) -> dict[str, Any]: ...
    def set_evaluation(self, doc: Mapping[str, Any]) -> None: ...
    def tick_lock(self, ttl_s: float) -> Any: ...
    def set_tick_info(self, info: Mapping[str, float]) -> None: ...
    def tick_info(self) -> dict[str, float]: ...


class TableStore(Protocol):
    """The published routing table."""

    def table(self) -> RoutingTable | None: ...
    def table_version(self) -> str | None: ...
    def publish_table(
        self, table: RoutingTable, doc: dict[str, Any] | None = None, text: bytes | None = None
    ) -> None: ...


class DrillMailbox(Protocol):
    """Drill instructions waiting for an endpoint's agent."""

    def set_drill(self, endpoint: str, instruction: Mapping[str, Any], ttl_s: float) -> None: ...
    def pop_drill(self, endpoint: str) -> dict[str, Any] | None: ...


class CompletionStream(Protocol):
    """Completions gateways reported, a bounded stream per region."""

    def add_completions(self, by_region: Mapping[str, Sequence[Completion]]) -> None: ...
    def completions(self, region: str, after: str | None, count: int) -> list[StreamEntry]: ...


class Versions(Protocol):
    """Counters bumped on every configuration and token write (caches compare them)."""

    def config_version(self) -> int: ...
    def bump_config_version(self) -> None: ...
    def token_version(self) -> int: ...
    def bump_token_version(self) -> None: ...


class Counters(Protocol):
    """Fleet-wide counters behind /metrics."""

    def incr(self, items: Iterable[tuple[str, float]]) -> None: ...
    def counters(self) -> dict[str, float]: ...


class HotState(
    HeartbeatStore,
    LoopStateStore,
    TableStore,
    DrillMailbox,
    CompletionStream,
    Versions,
    Counters,
    Protocol,
):
    """Every concern at once: the store a process holds."""

    def reset(self) -> None: ...
