"""Heartbeats in Redis: the compare-and-set put (one script per heartbeat, pipelined for a
batch), the decoded-once reads, and the spells of not taking heartbeats.

Kept apart from the rest of the Redis store because it is the hottest path (every heartbeat
of every agent) and the one with a restart story of its own: a Redis that lost its scripts
gets them loaded again mid-batch, and a process that could not reach Redis hands its spell
over (``regions.hotstate.impairment``) with the first put that succeeds.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import NoScriptError, RedisError

from regions.hotstate import impairment, scripts
from regions.hotstate.protocols import RESTART_GAP_S, SEQ_PER_S, HeartbeatPut, Order, PutResult
from trafficmgr.contracts import IMPAIRMENTS_KEY, decode_heartbeat, encode_heartbeat
from trafficmgr.routing.types import Heartbeat

# Impairment spells older than this are forgotten.
IMPAIRMENT_KEEP_S = 86400.0


def _put_result(raw: list[Any]) -> PutResult:
    ok, fresh, *drill = raw
    pending = json.loads(drill[0]) if drill and drill[0] else None
    return PutResult(bool(ok), bool(fresh), pending)


class RedisHeartbeats:
    """The heartbeats of ``RedisHotState`` (which provides the connection and keys)."""

    redis: Redis
    key: Callable[[str], str]
    _put: Any  # the registered PUT_HEARTBEAT_LUA script
    # Heartbeats decoded before, by endpoint: (stored JSON, heartbeat); reused while the
    # stored JSON is the same (``_lean_beats``: the same, histograms left out).
    _beats: dict[str, tuple[str, Heartbeat]]
    _lean_beats: dict[str, tuple[str, Heartbeat]]

    def put_heartbeat(
        self,
        hb: Heartbeat,
        bucket: int,
        totals: Mapping[str, list[int]] | None = None,
        order: Order | None = None,
    ) -> PutResult:
        keys, args = self._put_arguments(hb, bucket, totals, order)
        try:
            result = _put_result(self._put(keys=keys, args=args))
        except RedisError:
            impairment.note()
            raise
        self._hand_over_impairment()
        return result

    def put_heartbeats(self, items: Sequence[HeartbeatPut]) -> list[PutResult]:
        """Compare and set many heartbeats in one round trip (a pipeline), in order."""
        if len(items) == 1:
            return [self.put_heartbeat(*items[0])]
        try:
            results = self._put_many(items)
        except RedisError:
            impairment.note()
            raise
        self._hand_over_impairment()
        return results

    def _hand_over_impairment(self) -> None:
        """Give the hot state this process's spell of not reaching it, once it answers."""
        spell = impairment.pending()
        if spell is not None:
            with contextlib.suppress(RedisError):
                self.add_impairment(impairment.source(), spell)
                impairment.taken(spell)

    def _put_many(self, items: Sequence[HeartbeatPut]) -> list[PutResult]:
        calls = [self._put_arguments(*item) for item in items]
        raw: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _ in range(2):  # a second pass after Redis lost its scripts (restart, flush)
            pipe = self.redis.pipeline(transaction=False)
            for i in todo:
                keys, args = calls[i]
                pipe.evalsha(self._put.sha, len(keys), *keys, *args)
            answers = pipe.execute(raise_on_error=False)
            for i, answer in zip(todo, answers, strict=True):
                raw[i] = answer
            todo = [i for i in todo if isinstance(raw[i], NoScriptError)]
            if not todo:
                break
            self.redis.script_load(scripts.PUT_HEARTBEAT_LUA)
        for answer in raw:
            if isinstance(answer, Exception):
                raise answer
        return [_put_result(answer) for answer in raw]

    def _put_arguments(
        self,
        hb: Heartbeat,
        bucket: int,
        totals: Mapping[str, list[int]] | None = None,
        order: Order | None = None,
    ) -> tuple[list[str], list[Any]]:
        order = order or Order()
        keys = [
            self.key("heartbeats:meta"),
            self.key("heartbeats"),
            self.key("heartbeats:totals"),
            self.key(f"drill:{hb.endpoint}"),
        ]
        args = [
            hb.endpoint,
            hb.seq,
            repr(hb.sent_at),
            bucket,
            encode_heartbeat(hb),
            RESTART_GAP_S,
            json.dumps(totals or {}, separators=(",", ":")),
            repr(hb.received_at),
            order.session,
            repr(order.hold_s),
            SEQ_PER_S,
        ]
        return keys, args

    def error_totals(self, endpoint: str) -> dict[str, list[int]]:
        raw = self.redis.hget(self.key("heartbeats:totals"), endpoint)
        return json.loads(raw) if raw else {}

    def heartbeats(
        self, names: Iterable[str] | None = None, histograms: bool = True
    ) -> dict[str, Heartbeat]:
        """Return the latest heartbeats (one HGETALL or HMGET), decoding only new ones.

        ``histograms=False`` (the control loop) leaves the servers' output-length histograms
        unparsed; each way keeps its own cache of decoded heartbeats.
        """
        key = self.key("heartbeats")
        if names is None:
            raw = self.redis.hgetall(key)
        else:
            wanted = list(names)
            raw = dict(zip(wanted, self.redis.hmget(key, wanted), strict=True)) if wanted else {}  # type: ignore[arg-type]
        seen = self._beats if histograms else self._lean_beats
        out = {}
        for name, value in raw.items():
            if not value:
                continue
            hit = seen.get(name)  # type: ignore[arg-type]
            if hit is not None and hit[0] == value:
                out[name] = hit[1]
            else:
                out[name] = hb = decode_heartbeat(value, histograms)
                seen[name] = (value, hb)  # type: ignore[assignment, index]
        if names is None and len(seen) > len(out):  # endpoints gone from the hash
            for name in [n for n in seen if n not in out]:
                seen.pop(name, None)
        return out  # type: ignore[return-value]

    def impairments(self) -> list[tuple[float, float]]:
        """Every process's spells of not taking heartbeats (those older than a day dropped)."""
        raw: dict[str, str] = self.redis.hgetall(self.key(IMPAIRMENTS_KEY))  # type: ignore[assignment]
        spells, old = [], []
        cutoff = time.time() - IMPAIRMENT_KEEP_S
        for source, value in raw.items():
            start, _, end = value.partition(" ")
            try:
                spell = (float(start), float(end))
            except ValueError:
                spell = (0.0, 0.0)
            if spell[1] < cutoff:
                old.append(source)
            else:
                spells.append(spell)
        if old:
            self.redis.hdel(self.key(IMPAIRMENTS_KEY), *old)
        return spells

    def add_impairment(self, source: str, spell: tuple[float, float]) -> None:
        self.redis.hset(self.key(IMPAIRMENTS_KEY), source, f"{spell[0]!r} {spell[1]!r}")
