"""Bearer tokens are checked before they cost anything: shape first, a bounded digest-keyed
cache, bounded lookups in flight, and failures limited per client address."""

from __future__ import annotations

import asyncio
import secrets
import threading
import tracemalloc
from collections.abc import Mapping

from tests.gateway.world import TOKEN, locate, world_fleet
from tests.requestpath.conftest import ManualClock
from trafficmgr.requestpath import (
    ClientIdentity,
    Refusal,
    RequestPath,
    RequestPathConfig,
    StaticSource,
)
from trafficmgr.requestpath.tokens import TokenLimits

JUNK = "x" * 60_000  # fits in the 64 KiB head the gateway accepts


class CountingSource(StaticSource):
    """The static source, counting the lookups that reach it (and able to hold them)."""

    def __init__(self, tokens: Mapping[str, ClientIdentity]) -> None:
        super().__init__(world_fleet(), tokens, locate=locate)
        self.calls = 0
        self.hold = threading.Event()
        self.hold.set()

    def authenticate(self, token: str) -> ClientIdentity | None:
        self.calls += 1
        self.hold.wait(10)
        return super().authenticate(token)


def core_over(
    source: StaticSource, clock: ManualClock, **limits: float
) -> tuple[RequestPath, asyncio.AbstractEventLoop]:
    config = RequestPathConfig(token_limits=TokenLimits(**limits))  # type: ignore[arg-type]
    return RequestPath(source, config, clock=clock), asyncio.new_event_loop()


def same_shape() -> str:
    """A token as long as the valid one, unknown to the source."""
    return secrets.token_urlsafe(32)[: len(TOKEN)]


def test_over_long_tokens_never_reach_the_source_nor_the_cache(clock: ManualClock) -> None:
    source = CountingSource({TOKEN: ClientIdentity("t")})
    core, loop = core_over(source, clock)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(3_000):
        junk = JUNK + str(i)
        answer = loop.run_until_complete(core.identify(junk, f"10.{i // 250}.{i % 250}.1"))
        assert isinstance(answer, Refusal) and answer.status == 401
        assert core.cached_identity(junk) == (True, None)  # known at once: no one
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    loop.close()
    assert source.calls == 0 and core.tokens.lookups == 0
    assert core.tokens.held() == 0
    # 3,000 distinct 60 KB tokens are 180 MB; what stays is the per-address failure table
    assert grown < 2_000_000, grown


def test_unknown_tokens_stay_bounded_and_valid_ones_survive_the_flood(clock: ManualClock) -> None:
    source = CountingSource({TOKEN: ClientIdentity("t")})
    core, loop = core_over(source, clock, cache_size=100, negative_size=500)
    assert loop.run_until_complete(core.identify(TOKEN, "10.0.0.1")) == ClientIdentity("t")
    for i in range(5_000):
        answer = loop.run_until_complete(core.identify(same_shape(), f"10.1.{i // 250}.{i % 250}"))
        assert isinstance(answer, Refusal) and answer.status == 401
        assert core.tokens.held() <= 100 + 500
    loop.close()
    assert source.calls == 5_001
    assert core.cached_identity(TOKEN) == (True, ClientIdentity("t"))  # no new lookup needed


def test_entries_expire_and_the_least_recently_used_goes_first(clock: ManualClock) -> None:
    tokens = {f"token-{i:03d}": ClientIdentity(f"c{i}") for i in range(4)}
    source = CountingSource(tokens)
    core, loop = core_over(source, clock, cache_size=3, ttl_s=5.0)
    for token in list(tokens)[:3]:
        core.authenticate(token)
    assert core.cached_identity("token-000")[0]  # used: now the most recent
    core.authenticate("token-003")  # evicts token-001, the least recently used
    assert not core.cached_identity("token-001")[0]
    assert core.cached_identity("token-000") == (True, ClientIdentity("c0"))
    clock.advance(5.0)
    assert not core.cached_identity("token-000")[0]  # expired
    assert core.tokens.held() <= 3
    loop.close()


def test_repeated_failures_from_one_address_get_429_others_still_401(clock: ManualClock) -> None:
    source = CountingSource({TOKEN: ClientIdentity("t")})
    core, loop = core_over(source, clock, failures_burst=5, failures_per_s=0.5)
    run = loop.run_until_complete
    statuses = [run(core.identify("wrong-token-1", "203.0.113.7")) for _ in range(8)]
    codes = [a.status for a in statuses if isinstance(a, Refusal)]
    assert codes == [401] * 5 + [429] * 3
    limited = statuses[-1]
    assert isinstance(limited, Refusal) and limited.retry_after_s == 2
    other = run(core.identify("wrong-token-1", "203.0.113.8"))
    assert isinstance(other, Refusal) and other.status == 401
    calls = source.calls
    assert isinstance(run(core.identify(TOKEN, "203.0.113.7")), Refusal)  # refused up front
    assert source.calls == calls
    clock.advance(2.0)  # the bucket refills: one more try is allowed
    assert run(core.identify(TOKEN, "203.0.113.7")) == ClientIdentity("t")
    loop.close()


def test_failure_table_is_bounded(clock: ManualClock) -> None:
    core, loop = core_over(CountingSource({}), clock, clients_tracked=64)
    for i in range(1_000):
        loop.run_until_complete(core.identify(None, f"198.51.{i // 250}.{i % 250}"))
    loop.close()
    assert len(core.tokens.limiter) == 64


def test_lookups_in_flight_are_bounded_and_shared(clock: ManualClock) -> None:
    source = CountingSource({TOKEN: ClientIdentity("t")})
    core, loop = core_over(source, clock, max_pending=2)
    source.hold.clear()

    async def flood() -> list[ClientIdentity | Refusal]:
        first = [asyncio.ensure_future(core.identify(TOKEN, f"10.0.0.{i}")) for i in range(5)]
        second = asyncio.ensure_future(core.identify("other-token-x", "10.0.1.1"))
        await asyncio.sleep(0)  # both lookups are under way (and held)
        third = await core.identify("third-token-y", "10.0.1.2")  # a third lookup: refused
        source.hold.set()
        return [*(await asyncio.gather(*first, second)), third]

    answers = loop.run_until_complete(flood())
    loop.close()
    assert answers[:5] == [ClientIdentity("t")] * 5  # five requests, one lookup
    assert isinstance(answers[5], Refusal) and answers[5].status == 401
    busy = answers[6]
    assert isinstance(busy, Refusal) and (busy.status, busy.retry_after_s) == (503, 1)
    assert source.calls == 2 and core.tokens.lookups == 2
