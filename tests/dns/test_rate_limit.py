"""Response-rate limiting: a flood from one prefix is dropped or slipped, others still served."""

from __future__ import annotations

from collections.abc import Callable

import dns.flags
import dns.message
import pytest

from tests.dns.world import NAME, ask, query, quiet_config
from trafficmgr.dns.ratelimit import ALLOW, DROP, SLIP, RateLimiter, client_prefix
from trafficmgr.dns.server import DnsServer


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_client_prefix_groups_v4_by_24_and_v6_by_56() -> None:
    assert client_prefix("198.51.100.7") == client_prefix("198.51.100.250") == "198.51.100"
    assert client_prefix("198.51.101.7") != client_prefix("198.51.100.7")
    assert client_prefix("2001:db8:0:ff::1") == client_prefix("2001:db8:0:1::2")
    assert client_prefix("2001:db8:0:100::1") != client_prefix("2001:db8:0:1::1")
    assert client_prefix("::ffff:198.51.100.7") == "198.51.100"


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=10, burst=5, slip=0, clock=clock)
    assert [limiter.check("192.0.2.1") for _ in range(6)] == [ALLOW] * 5 + [DROP]
    clock.now += 0.1  # one token back
    assert limiter.check("192.0.2.200") == ALLOW  # same /24, same bucket
    assert limiter.check("192.0.2.1") == DROP
    assert limiter.check("198.51.100.1") == ALLOW  # another prefix has its own


def test_slip_answers_every_nth_limited_query() -> None:
    limiter = RateLimiter(rate=1, burst=1, slip=2, clock=FakeClock())
    assert limiter.check("192.0.2.1") == ALLOW
    assert [limiter.check("192.0.2.1") for _ in range(4)] == [DROP, SLIP, DROP, SLIP]


def test_rate_zero_turns_limiting_off() -> None:
    limiter = RateLimiter(rate=0)
    assert not limiter.enabled
    assert all(limiter.check("192.0.2.1") == ALLOW for _ in range(1000))


def test_the_table_of_buckets_stays_bounded() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=10, clock=clock, max_tracked=100)
    for i in range(1000):
        clock.now += 1.0
        limiter.check(f"10.{i // 256}.{i % 256}.1")
    assert len(limiter) <= 100


@pytest.mark.parametrize("slip", [0, 1, 2])
def test_flood_from_one_source_is_limited_and_counted_others_answered(
    make_server: Callable[..., DnsServer], slip: int
) -> None:
    server = make_server(quiet_config(rrl_rate=20, rrl_burst=20, rrl_slip=slip))
    server.responder.limiter = RateLimiter(20, 20, slip, clock=FakeClock())  # time stands still
    wire = query(NAME, "A").to_wire()
    replies = [server.handle(wire, "203.0.113.66") for _ in range(200)]
    answered = [r for r in replies if r is not None]
    full = [r for r in answered if not dns.message.from_wire(r).flags & dns.flags.TC]
    assert len(full) == 20  # the burst
    metrics = server.metrics
    assert metrics["rrl_dropped"] + metrics["rrl_slipped"] == 180
    if slip == 0:
        assert metrics["rrl_slipped"] == 0 and len(answered) == 20
    if slip == 1:
        assert metrics["rrl_dropped"] == 0 and len(answered) == 200
    if slip == 2:
        assert metrics["rrl_slipped"] == 90
    for reply in answered[20:]:
        slipped = dns.message.from_wire(reply)
        assert slipped.flags & dns.flags.TC and not slipped.answer  # tiny: no amplification
        assert len(reply) <= len(wire) + 12
    assert ask(server, query(NAME, "A"), source="198.51.100.5").answer  # a bystander
    assert ask(server, query(NAME, "A"), source="203.0.113.66", tcp=True).answer  # TCP exempt


def test_past_the_bound_the_least_recently_seen_prefix_is_forgotten() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=1, burst=1, slip=0, clock=clock, max_tracked=3)
    for address in ("10.0.1.1", "10.0.2.1", "10.0.3.1"):
        assert limiter.check(address) == ALLOW
    assert limiter.check("10.0.1.1") == DROP  # still limited; now the most recently seen
    assert limiter.check("10.0.4.1") == ALLOW  # evicts 10.0.2.0/24, not the limited one
    assert len(limiter) == 3
    assert limiter.check("10.0.1.1") == DROP  # its bucket was kept: no fresh burst
    assert limiter.check("10.0.2.1") == ALLOW  # forgotten: a new, full bucket
