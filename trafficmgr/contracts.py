"""Cross-process names and value layouts: what web, control loop, DNS servers and gateways agree on.

Every process that shares the hot state reads these names from here, so a key spelled in one
place cannot drift from the same key spelled in another. The Redis keys (all under the prefix
``trafficmgr``; ``table`` and the ``table:updates`` channel are also read by the DNS servers
and the gateways, which never import the Django app):

- ``table`` JSON of the published table (``table_to_json``), ``table:version`` its version,
  both set in one MULTI; each publish also sends the JSON on the ``table:updates`` channel;
- ``heartbeats`` hash endpoint → heartbeat JSON (``StoredHeartbeat``), ``heartbeats:meta``
  hash endpoint → ``"seq sent_at bucket"``, ``heartbeats:totals`` the agent's running error
  counts: a Lua script compares and sets all three, so concurrent web processes agree on the
  latest;
- ``machines``, ``evaluation`` JSON carried from tick to tick, ``evaluation:stamp`` set with
  each evaluation so that readers parse it once per tick; ``drill:<endpoint>`` pending
  drill instructions; ``lock:tick`` the tick lock (SET NX PX, renewed while the tick runs,
  released by compare-and-delete; its value is ``host:pid:nonce``), ``tick:fence`` the
  fencing token, bumped with each lock taken: a tick's state is written (one script: machines,
  evaluation, table, outbox) only while no newer fence exists;
- ``events:outbox`` a list of events (``Event`` rows as JSON) a tick could not write to the
  database, stored there by the next tick that can; ``epoch`` set once per Redis dataset, so
  that a restart that lost the data is noticed (state is then restored from the database);
  ``impairments`` hash process → ``"start end"``, the spells when a process could not take
  heartbeats for its own reasons (the loop holds its decisions over them);
- ``completions:<region>`` a stream of the completions gateways reported for the region's
  endpoints, one entry per request (field ``c``: a ``Completion`` as a JSON array), trimmed
  to about ``COMPLETIONS_MAXLEN``; every web process and gateway reads it to feed its own
  pickers;
- ``config-version`` bumped on every configuration write, ``token-version`` on every token
  write (cached principals are dropped); ``counters`` and ``tick`` hashes behind /metrics,
  so any process serves the fleet-wide figures (``tick`` fields: ``TICK_LAST_AT``,
  ``TICK_DECIDED_AT``, ``TICK_LAST_DURATION``).

The shared request-path state (``trafficmgr.requestpath.shared``: every gateway worker, gateway
host and endpoint-picker replica publishes its own part and merges the others'):

- ``rp:proc:<process id>`` the process's lease and its contribution, one ``SharedProcess``
  (msgspec JSON object: ``v`` layout version, ``pid``, ``at`` wall-clock seconds it was
  published, ``flight`` endpoint → ``[requests, prompt tokens not yet prefilled, expected
  output tokens not yet decoded]`` (as of ``at``), ``ejected``
  endpoint → ``[ejected until (wall-clock seconds), a half-open probe in flight]``, ``ramps``
  endpoint → the wall-clock second its slow start began), written whole with ``SET ... PX``
  the lease: a process that dies stops refreshing it and its work expires with it;
- ``rp:procs`` the set of process ids that published; a reader drops (``SREM``) the ids whose
  ``rp:proc:`` key is gone;
- ``rp:blocks`` a stream of the prompt blocks sent, one entry per publish (field ``p`` the
  process id, field ``b`` the ``SharedBlocks`` JSON: endpoint → block hashes), trimmed by
  length (``SHARED_BLOCKS_MAXLEN``) and age (``MINID``, the blocks' time to live); readers
  keep a bounded LRU per endpoint of what they read.

Two names cross processes through Django's cache (whose backend is this Redis in the
distributed mode, under Django's own key prefix): ``drill-alive:<id>``, set while a drill's
runner lives, and ``drill-progress:<id>``, the running drill's phase and figures
(``drill_alive_key``, ``drill_progress_key``).

No ``trafficmgr:`` key is spelled anywhere else (``tests/architecture/contract_keys.py``
fails the lint when one is).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import msgspec

from trafficmgr.routing.failover import RegionMachine
from trafficmgr.routing.types import (
    GpuSample,
    Heartbeat,
    OutputHistogram,
    ProbeSample,
    RegionState,
    ServerSample,
)

PREFIX = "trafficmgr"
TABLE_KEY = "table"
TABLE_VERSION_KEY = "table:version"
TABLE_CHANNEL_SUFFIX = "table:updates"
HEARTBEATS_KEY = "heartbeats"
HEARTBEATS_META_KEY = "heartbeats:meta"
HEARTBEATS_TOTALS_KEY = "heartbeats:totals"
MACHINES_KEY = "machines"
EVALUATION_KEY = "evaluation"
EVALUATION_STAMP_KEY = "evaluation:stamp"
TICK_LOCK_KEY = "lock:tick"
TICK_FENCE_KEY = "tick:fence"
EVENTS_OUTBOX_KEY = "events:outbox"
EPOCH_KEY = "epoch"
IMPAIRMENTS_KEY = "impairments"
CONFIG_VERSION_KEY = "config-version"
TOKEN_VERSION_KEY = "token-version"
COUNTERS_KEY = "counters"
TICK_INFO_KEY = "tick"
TICK_LAST_AT = "last_at"  # fields of the ``tick`` hash: when the last tick ran,
TICK_DECIDED_AT = "decided_at"  # when a tick last decided (held the lock and wrote its state),
TICK_LAST_DURATION = "last_duration_s"  # and how long the last one took
# Completions kept per region (Redis trims to about this many, ``MAXLEN ~``).
COMPLETIONS_MAXLEN = 20_000
SHARED_PROCS_KEY = "rp:procs"
SHARED_BLOCKS_KEY = "rp:blocks"
SHARED_LAYOUT = 1  # ``SharedProcess.v``: a reader ignores (and counts) any other
# Entries kept in the shared prompt-block stream (Redis trims to about this many).
SHARED_BLOCKS_MAXLEN = 50_000


def redis_key(name: str, prefix: str = PREFIX) -> str:
    """Return the full Redis key of ``name`` (e.g. ``trafficmgr:table``)."""
    return f"{prefix}:{name}"


def drill_key(endpoint: str) -> str:
    """Return the key (under the prefix) of an endpoint's pending drill instruction."""
    return f"drill:{endpoint}"


def completions_key(region: str) -> str:
    """Return the key (under the prefix) of a region's reported-completions stream."""
    return f"completions:{region}"


def shared_process_key(pid: str) -> str:
    """Return the key (under the prefix) of one process's lease and shared contribution."""
    return f"rp:proc:{pid}"


def drill_alive_key(drill_id: int) -> str:
    """Return the cache key set while drill ``drill_id``'s runner lives."""
    return redis_key(f"drill-alive:{drill_id}")


def drill_progress_key(drill_id: int) -> str:
    """Return the cache key of drill ``drill_id``'s published progress."""
    return redis_key(f"drill-progress:{drill_id}")


# Where the DNS servers and gateways read the published table and hear of a new one.
TABLE_REDIS_KEY = redis_key(TABLE_KEY)
TABLE_REDIS_CHANNEL = redis_key(TABLE_CHANNEL_SUFFIX)

_json = msgspec.json.Encoder()


class Completion(msgspec.Struct, array_like=True, frozen=True):
    """One completed request a gateway reported: what the region's pickers learn from."""

    endpoint: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float  # sent to the endpoint until its last token, measured at the gateway
    prefix_hashes: tuple[int, ...] = ()


class SharedProcess(msgspec.Struct, frozen=True):
    """One process's part of the shared request-path state (``rp:proc:<pid>``)."""

    v: int
    pid: str
    at: float  # wall-clock seconds when it was published
    # endpoint → (requests, outstanding prefill tokens, outstanding decode tokens)
    flight: dict[str, tuple[int, float, float]] = {}
    ejected: dict[str, tuple[float, bool]] = {}  # endpoint → (until, probing), wall clock
    ramps: dict[str, float] = {}  # endpoint → slow start began, wall clock


SharedBlocks = dict[str, list[int]]  # endpoint → prompt block hashes sent there
_shared_process = msgspec.json.Decoder(SharedProcess)
_shared_blocks = msgspec.json.Decoder(SharedBlocks)


def shared_part(
    pid: str,
    wall: float,
    flight: Iterable[tuple[str, int, float, float]],
    ejected: Mapping[str, tuple[float, bool]],
    ramps: Mapping[str, float],
) -> SharedProcess:
    """Return a process's part: its in flight per endpoint (idle ones left out), its
    ejections and its slow-start ramps, all in wall-clock seconds."""
    return SharedProcess(
        SHARED_LAYOUT,
        pid,
        wall,
        {name: (n, p, d) for name, n, p, d in flight if n > 0},
        dict(ejected),
        dict(ramps),
    )


def encode_shared_process(state: SharedProcess) -> bytes:
    return _json.encode(state)


def decode_shared_process(raw: bytes | str) -> SharedProcess:
    """Decode a process's contribution; raise ValueError naming why it is unusable."""
    try:
        state = _shared_process.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"corrupt: {exc}") from None
    if state.v != SHARED_LAYOUT:
        raise ValueError(f"foreign: layout {state.v}")
    return state


def encode_shared_blocks(blocks: SharedBlocks) -> bytes:
    return _json.encode(blocks)


def decode_shared_blocks(raw: bytes | str) -> SharedBlocks:
    """Decode a stream entry's blocks; raise ValueError when they do not decode."""
    try:
        return _shared_blocks.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"corrupt: {exc}") from None


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
