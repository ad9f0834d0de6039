"""Hot state: latest heartbeats, region machines, the published table, counters and the tick lock.

Two stores with one interface: Redis when ``REDIS_URL`` is set (shared by every web process,
worker and DNS server), a process-local store otherwise (the embedded demo and the tests).

Redis keys (prefix ``trafficmgr``; ``table`` and the ``table:updates`` channel are contracts
the DNS server reads):

- ``table`` JSON of the published table (``table_to_json``), ``table:version`` its version,
  both set in one MULTI; each publish also sends the JSON on the ``table:updates`` channel;
- ``heartbeats`` hash endpoint → heartbeat JSON (``StoredHeartbeat``), ``heartbeats:meta``
  hash endpoint → ``"seq sent_at bucket"``, ``heartbeats:totals`` the agent's running error
  counts: a Lua script compares and sets all three, so concurrent web processes agree on the
  latest;
- ``machines``, ``evaluation`` JSON carried from tick to tick, ``evaluation:stamp`` set with
  each evaluation so that readers parse it once per tick; ``drill:<endpoint>`` pending
  drill instructions; ``lock:tick`` the tick lock (SET NX PX, released by compare-and-delete);
- ``completions:<region>`` a stream of the completions gateways reported for the region's
  endpoints (``POST /api/v1/route/completions``), one entry per request (field ``c``: a
  ``Completion`` as a JSON array), trimmed to about ``COMPLETIONS_MAXLEN``; every web process
  reads it to feed its own pickers (``regions.decisions``);
- ``config-version`` bumped on every configuration write, ``token-version`` on every token
  write (cached principals are dropped, see ``regions.auth``); ``counters`` and ``tick`` hashes
  behind /metrics, so any process serves the fleet-wide figures.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

import msgspec
from django.conf import settings

from trafficmgr.routing.failover import RegionMachine
from trafficmgr.routing.types import (
    GpuSample,
    Heartbeat,
    OutputHistogram,
    ProbeSample,
    RegionState,
    RoutingTable,
    ServerSample,
)

PREFIX = "trafficmgr"
TABLE_CHANNEL_SUFFIX = "table:updates"
# Completions kept per region (Redis trims to about this many, ``MAXLEN ~``).
COMPLETIONS_MAXLEN = 20_000


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


class Completion(msgspec.Struct, array_like=True, frozen=True):
    """One completed request a gateway reported: what the region's pickers learn from."""

    endpoint: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float  # sent to the endpoint until its last token, measured at the gateway
    prefix_hashes: tuple[int, ...] = ()


# A stream entry: its id (``"<ms>-<seq>"``, ascending) and the completion.
StreamEntry = tuple[str, Completion]
_completion = msgspec.json.Decoder(Completion)


def stream_position(entry_id: str) -> tuple[int, int]:
    """Return a stream id's order: ``"1700000000000-3"`` → ``(1700000000000, 3)``."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def encode_completion(c: Completion) -> bytes:
    return _json.encode(c)


def decode_completions(raw: Iterable[tuple[str, str | bytes]]) -> list[StreamEntry]:
    """Decode stream entries; one that does not decode (written by a newer release, or
    damaged) is skipped, not fatal: a reader must keep routing."""
    out = []
    for entry_id, value in raw:
        try:
            out.append((entry_id, _completion.decode(value)))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


# --- (de)serialisation -------------------------------------------------------------------

_json = msgspec.json.Encoder()


def json_bytes(value: Any) -> bytes:
    """Encode a JSON document as compact UTF-8 (the values ``json.loads`` gives back)."""
    return _json.encode(value)


NO_HISTOGRAMS = msgspec.Raw(b"[]")  # the default itself is left out of the stored JSON


class StoredHeartbeat(msgspec.Struct, omit_defaults=True):
    """A heartbeat as the Redis hot state keeps it: JSON that decodes into the engine's types.

    GPUs and the server sample are objects named like the engine's dataclasses, so the decoder
    builds those itself; the probe is an ``[ok, latency_ms]`` pair; ``server`` and ``probe``
    are left out when absent.
    """

    endpoint: str
    seq: int
    sent_at: float
    received_at: float
    gpus: tuple[GpuSample, ...]
    server: ServerSample | None = None
    probe: tuple[bool, float] | None = None
    # The server's output-length histograms, kept out of ``server`` as raw JSON: only
    # ``/route`` reads them, and the control loop's 2,000 decodes a tick skip them.
    output_tokens: msgspec.Raw = NO_HISTOGRAMS


_stored_heartbeat = msgspec.json.Decoder(StoredHeartbeat)
_histograms = msgspec.json.Decoder(tuple[OutputHistogram, ...])


def encode_heartbeat(hb: Heartbeat) -> bytes:
    """Return the stored JSON of a heartbeat (see ``StoredHeartbeat``)."""
    p = hb.probe
    server, histograms = hb.server, NO_HISTOGRAMS
    if server is not None and server.output_tokens:
        histograms = msgspec.Raw(_json.encode(server.output_tokens))
        server = replace(server, output_tokens=())
    return _json.encode(
        StoredHeartbeat(
            hb.endpoint,
            hb.seq,
            hb.sent_at,
            hb.received_at,
            hb.gpus,
            server,
            None if p is None else (p.ok, p.latency_ms),
            histograms,
        )
    )


def decode_heartbeat(raw: bytes | str, histograms: bool = True) -> Heartbeat:
    """Rebuild a heartbeat from its stored JSON (either layout, see ``heartbeat_from_rows``).

    ``histograms=False`` leaves the server's output-length histograms out (not parsed).
    """
    try:
        s = _stored_heartbeat.decode(raw)
    except msgspec.ValidationError:
        return heartbeat_from_rows(json.loads(raw))
    p = s.probe
    server = s.server
    if histograms and s.output_tokens is not NO_HISTOGRAMS and server is not None:
        server = replace(server, output_tokens=_histograms.decode(s.output_tokens))
    return Heartbeat(
        s.endpoint,
        s.seq,
        s.sent_at,
        s.received_at,
        s.gpus,
        server,
        None if p is None else ProbeSample(p[0], p[1]),
    )


def heartbeat_from_rows(doc: Mapping[str, Any]) -> Heartbeat:
    """Rebuild a heartbeat stored with GPUs and server as rows (the layout before objects).

    A silent endpoint's last heartbeat stays in Redis, so this layout can outlive an upgrade.
    """
    s = doc.get("server")
    p = doc.get("probe")
    return Heartbeat(
        endpoint=doc["endpoint"],
        seq=doc["seq"],
        sent_at=doc["sent_at"],
        received_at=doc["received_at"],
        gpus=tuple(
            GpuSample(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], tuple(g[8]), g[9], g[10])
            for g in doc["gpus"]
        ),
        server=ServerSample(s[0], s[1], s[2], s[3], s[4], s[5], s[6], tuple(s[7])) if s else None,
        probe=ProbeSample(p[0], p[1]) if p else None,
    )


def machine_to_doc(m: RegionMachine) -> dict[str, Any]:
    return {
        "state": m.state.value,
        "since": m.since,
        "good_streak": m.good_streak,
        "bad_streak": m.bad_streak,
        "paused": m.paused,
        "evidence_at": m.evidence_at,
    }


def machine_from_doc(doc: Mapping[str, Any]) -> RegionMachine:
    return RegionMachine(
        RegionState(doc["state"]),
        doc["since"],
        doc["good_streak"],
        doc["bad_streak"],
        doc["paused"],
        doc.get("evidence_at"),
    )


def counter_field(name: str, labels: Mapping[str, str] | None = None) -> str:
    """Return the storage key of one labelled counter, e.g. ``ingest|reason=stale seq``."""
    if not labels:
        return name
    return name + "|" + "\x1f".join(f"{k}={v}" for k, v in sorted(labels.items()))


def parse_counter_field(field: str) -> tuple[str, dict[str, str]]:
    name, _, rest = field.partition("|")
    labels = dict(item.split("=", 1) for item in rest.split("\x1f")) if rest else {}
    return name, labels


# --- the interface -----------------------------------------------------------------------


class HotState(Protocol):
    def put_heartbeat(
        self, hb: Heartbeat, bucket: int, totals: Mapping[str, list[int]] | None = None
    ) -> PutResult: ...
    def put_heartbeats(self, items: Sequence[HeartbeatPut]) -> list[PutResult]: ...
    def error_totals(self, endpoint: str) -> dict[str, list[int]]: ...
    def heartbeats(
        self, names: Iterable[str] | None = None, histograms: bool = True
    ) -> dict[str, Heartbeat]: ...
    def machines(self) -> dict[str, RegionMachine]: ...
    def set_machines(self, machines: Mapping[str, RegionMachine]) -> None: ...
    def evaluation(self) -> dict[str, Any]: ...
    def set_evaluation(self, doc: Mapping[str, Any]) -> None: ...
    def table(self) -> RoutingTable | None: ...
    def table_version(self) -> str | None: ...
    def publish_table(
        self, table: RoutingTable, doc: dict[str, Any] | None = None, text: bytes | None = None
    ) -> None: ...
    def set_drill(self, endpoint: str, instruction: Mapping[str, Any], ttl_s: float) -> None: ...
    def pop_drill(self, endpoint: str) -> dict[str, Any] | None: ...
    def add_completions(self, by_region: Mapping[str, Sequence[Completion]]) -> None: ...
    def completions(self, region: str, after: str | None, count: int) -> list[StreamEntry]: ...
    def tick_lock(self, ttl_s: float) -> Any: ...
    def config_version(self) -> int: ...
    def bump_config_version(self) -> None: ...
    def token_version(self) -> int: ...
    def bump_token_version(self) -> None: ...
    def incr(self, items: Iterable[tuple[str, float]]) -> None: ...
    def counters(self) -> dict[str, float]: ...
    def set_tick_info(self, info: Mapping[str, float]) -> None: ...
    def tick_info(self) -> dict[str, float]: ...
    def reset(self) -> None: ...


class MemoryHotState:
    """The process-local store (embedded mode, tests); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._completion_seq = 0  # not reset: ids stay ascending for readers of this store
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._hb: dict[str, Heartbeat] = {}
            self._meta: dict[str, tuple[int, float, int]] = {}
            self._totals: dict[str, dict[str, list[int]]] = {}
            self._machines: dict[str, RegionMachine] = {}
            self._evaluation: dict[str, Any] = {}
            self._table: RoutingTable | None = None
            self._drills: dict[str, tuple[float, dict[str, Any]]] = {}
            self._config_version = 0
            self._token_version = 0
            self._counters: dict[str, float] = {}
            self._tick: dict[str, float] = {}
            self._completions: dict[str, deque[tuple[int, Completion]]] = {}
            self.listeners: list[Any] = []

    def put_heartbeat(
        self, hb: Heartbeat, bucket: int, totals: Mapping[str, list[int]] | None = None
    ) -> PutResult:
        with self._lock:
            old = self._meta.get(hb.endpoint)
            if old is not None and not is_newer(hb.seq, hb.sent_at, old[0], old[1]):
                return PutResult(False, False)
            self._meta[hb.endpoint] = (hb.seq, hb.sent_at, bucket)
            self._hb[hb.endpoint] = hb
            self._totals[hb.endpoint] = dict(totals or {})
            fresh = old is None or old[2] != bucket
        return PutResult(True, fresh, self.pop_drill(hb.endpoint))

    def put_heartbeats(self, items: Sequence[HeartbeatPut]) -> list[PutResult]:
        return [self.put_heartbeat(*item) for item in items]

    def error_totals(self, endpoint: str) -> dict[str, list[int]]:
        with self._lock:
            return dict(self._totals.get(endpoint, {}))

    def heartbeats(
        self, names: Iterable[str] | None = None, histograms: bool = True
    ) -> dict[str, Heartbeat]:
        """Return the latest heartbeats (held as objects: ``histograms`` costs nothing here)."""
        with self._lock:
            if names is None:
                return dict(self._hb)
            return {n: self._hb[n] for n in names if n in self._hb}

    def machines(self) -> dict[str, RegionMachine]:
        with self._lock:
            return dict(self._machines)

    def set_machines(self, machines: Mapping[str, RegionMachine]) -> None:
        with self._lock:
            self._machines = dict(machines)

    def evaluation(self) -> dict[str, Any]:
        with self._lock:
            return self._evaluation

    def set_evaluation(self, doc: Mapping[str, Any]) -> None:
        with self._lock:
            self._evaluation = dict(doc)

    def table(self) -> RoutingTable | None:
        return self._table

    def table_version(self) -> str | None:
        table = self._table
        return table.version if table is not None else None

    def publish_table(
        self, table: RoutingTable, doc: dict[str, Any] | None = None, text: bytes | None = None
    ) -> None:
        self._table = table
        for listener in list(self.listeners):
            listener(table)

    def set_drill(self, endpoint: str, instruction: Mapping[str, Any], ttl_s: float) -> None:
        with self._lock:
            self._drills[endpoint] = (time.monotonic() + ttl_s, dict(instruction))

    def pop_drill(self, endpoint: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._drills.pop(endpoint, None)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def add_completions(self, by_region: Mapping[str, Sequence[Completion]]) -> None:
        """Append to each region's bounded stream (ids ``"0-<n>"``, ascending)."""
        with self._lock:
            for region, items in by_region.items():
                stream = self._completions.get(region)
                if stream is None:
                    stream = self._completions[region] = deque(maxlen=COMPLETIONS_MAXLEN)
                for c in items:
                    self._completion_seq += 1
                    stream.append((self._completion_seq, c))

    def completions(self, region: str, after: str | None, count: int) -> list[StreamEntry]:
        """Return up to ``count`` entries after the id ``after``, oldest first; with ``after``
        None the last ``count`` of the stream."""
        last = -1 if after is None else stream_position(after)[1]
        chosen: list[tuple[int, Completion]] = []
        with self._lock:
            for item in reversed(self._completions.get(region, ())):
                if item[0] <= last or (after is None and len(chosen) >= count):
                    break
                chosen.append(item)
        chosen.reverse()
        return [(f"0-{seq}", c) for seq, c in chosen[: max(0, count)]]

    @contextmanager
    def tick_lock(self, ttl_s: float) -> Iterator[bool]:
        held = self._tick_lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                self._tick_lock.release()

    def config_version(self) -> int:
        return self._config_version

    def bump_config_version(self) -> None:
        with self._lock:
            self._config_version += 1

    def token_version(self) -> int:
        return self._token_version

    def bump_token_version(self) -> None:
        with self._lock:
            self._token_version += 1

    def incr(self, items: Iterable[tuple[str, float]]) -> None:
        with self._lock:
            for field, amount in items:
                self._counters[field] = self._counters.get(field, 0.0) + amount

    def counters(self) -> dict[str, float]:
        with self._lock:
            return dict(self._counters)

    def set_tick_info(self, info: Mapping[str, float]) -> None:
        with self._lock:
            self._tick.update(info)

    def tick_info(self) -> dict[str, float]:
        with self._lock:
            return dict(self._tick)


_store: HotState | None = None
_store_lock = threading.Lock()


def get() -> HotState:
    """Return this process's hot state: Redis when REDIS_URL is set, else in-process."""
    global _store
    if _store is None:
        with _store_lock:
            if _store is None:
                url = getattr(settings, "REDIS_URL", "")
                if url:
                    from regions.hotstate_redis import RedisHotState

                    _store = RedisHotState(url)
                else:
                    _store = MemoryHotState()
    return _store


def use(store: HotState | None) -> None:
    """Replace this process's hot state (tests); None goes back to the configured one."""
    global _store
    _store = store
