"""Failures: wrong TSIG key, server down, unknown regions and zone keys; each clear and counted."""

from __future__ import annotations

import time

import pytest

from tests.dns_publish.conftest import Bind
from tests.dns_publish.servers import new_key
from tests.dns_publish.world import make_table, make_zone, table_v1
from trafficmgr.dns.publishers import (
    PowerDnsTarget,
    RetryPolicy,
    Rfc2136Target,
    TsigError,
    TsigKey,
    UnknownRegionError,
    UnknownZoneKeyError,
    UnreachableError,
    metrics,
    publish,
)
from trafficmgr.testing.ports import TCP_AND_UDP, free_ports

FAST = RetryPolicy(attempts=3, first_delay_s=0.05, max_delay_s=0.2)


@pytest.mark.integration
@pytest.mark.parametrize("wrong", ["secret", "name"])
def test_a_wrong_tsig_key_is_a_clear_error_and_counted(bind: Bind, wrong: str) -> None:
    good = bind.default.key
    key = TsigKey(good.name, new_key("x").secret) if wrong == "secret" else new_key("tm-nobody")
    target = Rfc2136Target(make_zone(), "127.0.0.1", key, port=bind.port, retry=FAST)
    before = metrics().get("errors_auth", 0)

    with pytest.raises(TsigError, match=f"rejected TSIG key '{key.name}'") as caught:
        target.publish(table_v1())

    assert caught.value.target == target.name
    assert target.metrics.get("errors_auth") == 1
    assert target.metrics.get("retries") == 0  # a rejected key is not retried
    assert metrics()["errors_auth"] == before + 1


def test_a_server_that_is_down_is_retried_then_reported() -> None:
    (port,) = free_ports(1, TCP_AND_UDP)  # nothing listens there
    target = Rfc2136Target(make_zone(), "127.0.0.1", new_key("k"), port=port, retry=FAST)
    started = time.monotonic()

    with pytest.raises(UnreachableError, match="failed after 3 attempt") as caught:
        target.publish(table_v1())

    assert caught.value.attempts == 3
    assert target.metrics.get("retries") == 2
    assert target.metrics.get("errors_unreachable") == 1
    assert 0.08 < time.monotonic() - started < 5  # backed off, and bounded


def test_a_powerdns_api_that_is_down_is_retried_then_reported() -> None:
    (port,) = free_ports(1, TCP_AND_UDP)
    target = PowerDnsTarget(make_zone(), f"http://127.0.0.1:{port}", "key", retry=FAST)

    with pytest.raises(UnreachableError, match="read zone failed after 3 attempt"):
        target.publish(table_v1())

    assert target.metrics.get("api_requests") == 3


def test_a_table_naming_an_unknown_region_is_refused_before_any_request() -> None:
    (port,) = free_ports(1, TCP_AND_UDP)
    table = make_table("bad000000001", {"default": {"llama-3-70b": [("mars-north", 1.0)]}})
    target = Rfc2136Target(make_zone(), "127.0.0.1", new_key("k"), port=port, retry=FAST)

    with pytest.raises(UnknownRegionError, match="mars-north") as caught:
        target.publish(table)

    assert caught.value.regions == ["mars-north"]
    assert target.metrics.get("errors_table") == 1
    assert target.metrics.get("retries") == 0  # failed before touching the network


def test_an_unknown_client_zone_key_fails_when_the_target_is_built() -> None:
    with pytest.raises(UnknownZoneKeyError, match="'XX'"):
        Rfc2136Target(make_zone(), "127.0.0.1", new_key("k"), client_zone="XX")


def test_publish_reports_every_failure_and_carries_on() -> None:
    (port,) = free_ports(1, TCP_AND_UDP)
    down = Rfc2136Target(make_zone(), "127.0.0.1", new_key("k"), port=port, retry=FAST)
    api = PowerDnsTarget(make_zone(), f"http://127.0.0.1:{port}", "key", retry=FAST)

    report = publish(table_v1(), [down, api])

    assert not report.ok
    assert [e.target for e in report.errors] == [down.name, api.name]
    assert "FAILED" in report.summary()
    with pytest.raises(UnreachableError):
        report.raise_for_errors()
