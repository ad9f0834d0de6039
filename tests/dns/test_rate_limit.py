"""Response-rate limiting keyed like BIND's RRL: client prefix x response identity.

Before, one bucket per client prefix counted every response alike: a big resolver's /24
asking for several names shared one budget, and a flood of one name took the others down
with it. Now each (prefix, name, type) has its own credit, NXDOMAIN shares one per prefix
(random names get no bucket each) and so do errors; a key kept over its rate stays limited
through its window; exempt networks are never limited. The limiter as a function here; the
responder and its counters in test_rrl_responses.py.
"""

from __future__ import annotations

import pytest

from trafficmgr.dns.ratelimit import (
    ALLOW,
    DROP,
    ERROR_IDENTITY,
    NXDOMAIN_IDENTITY,
    SLIP,
    RateLimiter,
    answer_identity,
    client_prefix,
    parse_networks,
)

API_A = answer_identity(b"\x03api\x05infer\x07example\x04test\x00", 1)
API_AAAA = answer_identity(b"\x03api\x05infer\x07example\x04test\x00", 28)
MODEL_A = answer_identity(b"\x05llama\x05infer\x07example\x04test\x00", 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_client_prefix_groups_v4_by_24_and_v6_by_56_or_as_configured() -> None:
    assert client_prefix("198.51.100.7") == client_prefix("198.51.100.250")
    assert client_prefix("198.51.101.7") != client_prefix("198.51.100.7")
    assert client_prefix("2001:db8:0:ff::1") == client_prefix("2001:db8:0:1::2")
    assert client_prefix("2001:db8:0:100::1") != client_prefix("2001:db8:0:1::1")
    assert client_prefix("::ffff:198.51.100.7") == client_prefix("198.51.100.9")
    assert client_prefix("198.51.100.7", 28) != client_prefix("198.51.100.250", 28)
    assert client_prefix("198.51.100.7", 28) == client_prefix("198.51.100.15", 28)
    assert client_prefix("2001:db8::1", ipv6_prefix=64) != client_prefix("2001:db8:0:1::1", 24, 64)


def test_each_name_and_type_has_its_own_credit() -> None:
    limiter = RateLimiter(rate=5, slip=0, clock=FakeClock())
    assert [limiter.check("192.0.2.1", API_A) for _ in range(6)] == [ALLOW] * 5 + [DROP]
    assert limiter.check("192.0.2.200", API_A) == DROP  # same /24, same response: same key
    assert limiter.check("192.0.2.1", API_AAAA) == ALLOW  # another type
    assert limiter.check("192.0.2.1", MODEL_A) == ALLOW  # another name
    assert limiter.check("198.51.100.1", API_A) == ALLOW  # another prefix
    # Letter case does not make a name new.
    upper = answer_identity(b"\x03API\x05infer\x07example\x04test\x00", 1)
    assert upper == API_A


def test_nxdomain_and_errors_share_one_credit_per_prefix_each() -> None:
    limiter = RateLimiter(rate=100, nxdomain_rate=3, error_rate=2, slip=0, clock=FakeClock())
    assert [limiter.check("192.0.2.1", NXDOMAIN_IDENTITY) for _ in range(4)] == [ALLOW] * 3 + [DROP]
    assert [limiter.check("192.0.2.1", ERROR_IDENTITY) for _ in range(3)] == [ALLOW] * 2 + [DROP]
    assert limiter.check("192.0.2.1", API_A) == ALLOW  # answers are counted apart


def test_a_key_kept_over_its_rate_stays_limited_through_its_window() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=10, slip=0, clock=clock, window_s=2.0)
    for _ in range(200):  # far over: the debt reaches its floor, 2 s' worth
        limiter.check("192.0.2.1", API_A)
    clock.now += 1.5  # not long enough to pay 20 responses of debt back
    assert limiter.check("192.0.2.1", API_A) == DROP
    clock.now += 2.6
    assert limiter.check("192.0.2.1", API_A) == ALLOW


def test_slip_answers_every_nth_limited_response() -> None:
    limiter = RateLimiter(rate=1, burst=1, slip=2, clock=FakeClock())
    assert limiter.check("192.0.2.1", API_A) == ALLOW
    assert [limiter.check("192.0.2.1", API_A) for _ in range(4)] == [DROP, SLIP, DROP, SLIP]


def test_exempt_networks_are_never_limited() -> None:
    exempt = parse_networks(["192.0.2.0/28", "2001:db8:5::/48"], "--rrl-exempt")
    limiter = RateLimiter(rate=1, slip=0, clock=FakeClock(), exempt=exempt)
    assert all(limiter.check("192.0.2.5", API_A) == ALLOW for _ in range(100))
    assert all(limiter.check("::ffff:192.0.2.6", API_A) == ALLOW for _ in range(100))
    assert all(limiter.check("2001:db8:5:1::9", API_A) == ALLOW for _ in range(100))
    assert [limiter.check("192.0.2.77", API_A) for _ in range(2)] == [ALLOW, DROP]


def test_a_bad_exempt_network_is_named() -> None:
    with pytest.raises(ValueError, match="--rrl-exempt 'resolvers'"):
        parse_networks(["192.0.2.0/24", "resolvers"], "--rrl-exempt")


def test_rate_zero_turns_limiting_off_and_a_class_rate_zero_that_class() -> None:
    off = RateLimiter(rate=0)
    assert not off.enabled
    assert all(off.check("192.0.2.1", API_A) == ALLOW for _ in range(1000))
    no_nx = RateLimiter(rate=1, nxdomain_rate=0, slip=0, clock=FakeClock())
    assert all(no_nx.check("192.0.2.1", NXDOMAIN_IDENTITY) == ALLOW for _ in range(1000))
    assert [no_nx.check("192.0.2.1", API_A) for _ in range(2)] == [ALLOW, DROP]


def test_the_default_lets_a_big_resolver_through() -> None:
    """A resolver /24 asking one name 150 times a second (ECS: one cache per client scope,
    a 10 s TTL, 1,500 client scopes), and NXDOMAIN for 30 typos a second, for a minute."""
    from trafficmgr.dns.config import ServerConfig

    c = ServerConfig()
    clock = FakeClock()
    limiter = RateLimiter(
        c.rrl_rate,
        c.rrl_burst,
        c.rrl_slip,
        clock,
        nxdomain_rate=c.rrl_nxdomain_rate,
        error_rate=c.rrl_error_rate,
        window_s=c.rrl_window_s,
    )
    verdicts = []
    for tick in range(60 * 150):
        clock.now += 1 / 150
        resolver = f"203.0.113.{tick % 200 + 1}"  # its egress addresses, one /24
        verdicts.append(limiter.check(resolver, API_A))
        if tick % 5 == 0:
            verdicts.append(limiter.check(resolver, NXDOMAIN_IDENTITY))
    assert set(verdicts) == {ALLOW}


def test_the_table_of_keys_stays_bounded() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=10, clock=clock, max_tracked=100)
    for i in range(1000):
        clock.now += 1.0
        limiter.check(f"10.{i // 256}.{i % 256}.1", API_A)
    assert len(limiter) <= 100


def test_past_the_bound_the_least_recently_seen_key_is_forgotten() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=1, burst=1, slip=0, clock=clock, max_tracked=3)
    for address in ("10.0.1.1", "10.0.2.1", "10.0.3.1"):
        assert limiter.check(address, API_A) == ALLOW
    assert limiter.check("10.0.1.1", API_A) == DROP  # still limited; now the most recent
    assert limiter.check("10.0.4.1", API_A) == ALLOW  # evicts 10.0.2.0/24's key
    assert len(limiter) == 3
    assert limiter.check("10.0.1.1", API_A) == DROP  # its key was kept: no fresh burst
    assert limiter.check("10.0.2.1", API_A) == ALLOW  # forgotten: a new, full credit
