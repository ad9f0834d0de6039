"""What every hot-state store offers, split by concern, and the rules they share.

A caller names the concern it needs (``HeartbeatStore``, ``TableStore``, ...); ``HotState`` is
all of them, what ``regions.hotstate.get`` returns. Two adapters implement it:
``regions.hotstate.memory`` (one process: the embedded demo and the tests) and
``regions.hotstate.redis_store`` (every process of the distributed mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
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


@dataclass(frozen=True, slots=True)
class Order:
    """How a heartbeat is ordered against the stored one (see ``is_newer``)."""

    session: str = ""  # the agent run that sent it ("": an agent that sends none)
    hold_s: float = 1.0  # one heartbeat interval: the longest a stored beat blocks others


# One heartbeat to compare and set: the beat, its history bucket, the agent's running counts
# and its ordering (an absent ``Order`` is ``Order()``).
HeartbeatPut = tuple[Heartbeat, int, Mapping[str, list[int]] | None, Order]

RESTART_GAP_S = 2.0
# The largest seq step taken at face value per second since the stored heartbeat arrived (our
# agents count milliseconds of their wall clock), plus one interval's worth: a larger step
# is stored as that much, so a forged huge seq cannot outrank the real ones for long.
SEQ_PER_S = 1000


@dataclass(frozen=True, slots=True)
class Stored:
    """The ordering facts of the stored heartbeat of an endpoint."""

    seq: int
    sent_at: float
    received_at: float | None = None  # None: stored by an older release
    session: str = ""


def is_newer(seq: int, sent_at: float, received_at: float, order: Order, old: Stored) -> bool:
    """Tell whether a heartbeat supersedes the stored one.

    - another session (an agent restart, or an agent that starts sending one) wins at once;
    - in one session a higher seq wins; a lower or equal one (a replay, an out-of-order
      delivery) loses, but only within ``order.hold_s`` (one heartbeat interval) of the stored
      beat's arrival: a forged or replayed beat silences nobody for longer than that;
    - without sessions, a beat sent ``RESTART_GAP_S`` after the stored one also wins (an old
      agent restarted and counts from zero again); ``sent_at`` is checked against the control
      plane's clock before this (``regions.loop.heartbeat_doc.FUTURE_S``).
    """
    if order.session != old.session or seq > old.seq:
        return True
    if not order.session and sent_at >= old.sent_at + RESTART_GAP_S:
        return True
    return old.received_at is None or received_at >= old.received_at + order.hold_s


def stored_seq(seq: int, received_at: float, order: Order, old: Stored | None) -> int:
    """The seq to keep for an accepted beat: a jump beyond plausibility is cut down to it."""
    if old is None or old.session != order.session or old.received_at is None or seq <= old.seq:
        return seq
    elapsed = max(0.0, received_at - old.received_at) + order.hold_s
    return min(seq, old.seq + int(SEQ_PER_S * elapsed) + 1)


@dataclass
class Lease:
    """The tick lock as held by one tick: false when another tick holds it.

    ``fence`` grows with every acquisition (the fencing token): a write of the tick's state
    carries it, and the stores refuse one older than the newest lease, so a tick that stalled
    past its lock's expiry cannot publish over a newer tick. ``lost`` tells that renewing the
    lock found it gone.
    """

    held: bool
    fence: int = 0
    lost: bool = False

    def __bool__(self) -> bool:
        return self.held


UNFENCED = -1


@dataclass(frozen=True, slots=True)
class TickState:
    """What one tick leaves in the hot state, written at once and only under its fence."""

    fence: int  # the lease's; UNFENCED for a tick run without the lock (tests, tools)
    machines: Mapping[str, RegionMachine]
    evaluation: Mapping[str, Any]
    table: RoutingTable | None = None  # a new version to publish
    table_text: bytes | None = None  # its JSON
    outbox: Sequence[bytes] = ()  # events the database did not take, to store later


class HeartbeatStore(Protocol):
    """Latest heartbeat per endpoint, compared and set by sequence."""

    def put_heartbeat(
        self,
        hb: Heartbeat,
        bucket: int,
        totals: Mapping[str, list[int]] | None = None,
        order: Order | None = None,
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
    def tick_lock(self, ttl_s: float, fence_floor: int = 0) -> Any: ...
    def save_tick(self, state: TickState) -> bool: ...
    def outbox(self, count: int) -> list[bytes]: ...
    def trim_outbox(self, count: int) -> None: ...
    def epoch(self) -> str | None: ...
    def claim_epoch(self, epoch: str) -> bool: ...
    def impairments(self) -> list[tuple[float, float]]: ...
    def add_impairment(self, source: str, spell: tuple[float, float]) -> None: ...
    def set_tick_info(self, info: Mapping[str, float]) -> None: ...
    def tick_info(self) -> dict[str, float]: ...


class TableStore(Protocol):
    """The published routing table."""

    def table(self) -> RoutingTable | None: ...
    def table_version(self) -> str | None: ...
    def publish_table(
        self, table: RoutingTable, doc: dict[str, Any] | None = None, text: bytes | None = None
    ) -> None: ...
    def follow_tables(self, listener: Callable[[RoutingTable], None]) -> Callable[[], None]:
        """Hand ``listener`` every table published from now on, by any process sharing the
        store (the current one first, if any); return the function that stops it."""
        ...


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
