"""BIND 9 with two views, each updated with its own TSIG key (RFC 2136), diffed via AXFR.

The views are matched by source address here (``eu`` for 127.0.0.2, ``default`` for
everyone else) where production matches GeoIP ACLs (deploy/bind/named.conf); both also
match the view's key first, which is how the updates and transfers reach the right view.
"""

from __future__ import annotations

import pytest

from tests.dns_publish.conftest import Bind
from tests.dns_publish.servers import soa_serial
from tests.dns_publish.world import (
    EU_WEST_V4,
    EU_WEST_V6,
    US_EAST_V4,
    ask,
    fqdn,
    make_zone,
    table_v1,
    table_v2,
)
from trafficmgr.dns.publishers import Rfc2136Target, ViewSpec, publish, view_targets

pytestmark = pytest.mark.integration

EU = "127.0.0.2"
ELSEWHERE = "127.0.0.1"


def targets(bind: Bind) -> list[Rfc2136Target]:
    views = {
        "eu": ViewSpec("EU", "127.0.0.1", bind.eu.key, bind.port),
        "default": ViewSpec("default", "127.0.0.1", bind.default.key, bind.port),
    }
    return view_targets(make_zone(), views)


def test_each_view_answers_its_client_zone(bind: Bind) -> None:
    report = publish(table_v1(), targets(bind))

    assert report.ok, report.summary()
    eu, default = report.results
    assert (eu.source, eu.created, eu.updated, eu.deleted) == ("axfr", 9, 0, 0)
    assert (default.source, default.created) == ("axfr", 8)
    name = fqdn("llama-3-70b")
    assert ask(bind.port, name, "A", EU) == {EU_WEST_V4}
    assert ask(bind.port, name, "AAAA", EU) == {EU_WEST_V6}
    assert ask(bind.port, name, "A", ELSEWHERE) == {US_EAST_V4}
    assert ask(bind.port, name, "AAAA", ELSEWHERE) == {EU_WEST_V6}  # the only IPv6 region
    assert ask(bind.port, fqdn("llama-3-8b"), "AAAA", ELSEWHERE) == set()
    assert ask(bind.port, fqdn("api"), "A", ELSEWHERE) == {US_EAST_V4}
    (txt,) = ask(bind.port, name, "TXT", EU)
    assert txt.startswith('"trafficmgr table=v1a1a1a1a1a1 zone=EU model=llama-3-70b"')
    assert "region=eu-west weight=1.0000 answered=yes" in txt
    assert ask(bind.port, fqdn("www"), "A", ELSEWHERE) == {"192.0.2.200"}  # not ours


def test_a_new_table_sends_only_the_difference(bind: Bind) -> None:
    view_eu, view_default = targets(bind)
    publish(table_v1(), [view_eu, view_default]).raise_for_errors()
    serial_eu, serial_default = soa_serial(bind.port, EU), soa_serial(bind.port, ELSEWHERE)
    assert serial_eu is not None and serial_default is not None

    eu = view_eu.publish(table_v2())
    default = view_default.publish(table_v2())

    # default: llama-3-70b's A flips to eu-west (-1 +1 RR); every TXT names the new version
    assert (default.created, default.updated, default.deleted) == (0, 4, 0)
    assert (default.update_ops, default.messages, default.unchanged) == (8, 1, 4)
    assert (eu.created, eu.updated, eu.deleted, eu.update_ops) == (0, 3, 0, 6)
    assert ask(bind.port, fqdn("llama-3-70b"), "A", ELSEWHERE) == {EU_WEST_V4}
    assert ask(bind.port, fqdn("api"), "A", ELSEWHERE) == {US_EAST_V4}  # average still us-east
    after = (soa_serial(bind.port, EU), soa_serial(bind.port, ELSEWHERE))
    assert after == (serial_eu + 1, serial_default + 1)  # one UPDATE message per view

    again = view_default.publish(table_v2())
    assert (again.update_ops, again.messages, again.unchanged) == (0, 0, 8)
    assert soa_serial(bind.port, ELSEWHERE) == after[1]
    assert view_default.metrics.get("rrsets_updated") == 4


def test_a_model_leaving_the_table_is_deleted_and_nothing_else(bind: Bind) -> None:
    (_, view_default) = targets(bind)
    view_default.publish(table_v1())
    smaller = make_zone(models=("llama-3-70b",))
    (_, shrunk) = view_targets(
        smaller,
        {
            "eu": ViewSpec("EU", "127.0.0.1", bind.eu.key, bind.port),
            "default": ViewSpec("default", "127.0.0.1", bind.default.key, bind.port),
        },
    )

    result = shrunk.publish(table_v1())

    assert result.deleted == 2  # llama-3-8b's A and TXT, found through the marker
    assert ask(bind.port, fqdn("llama-3-8b"), "A", ELSEWHERE) == set()
    assert ask(bind.port, fqdn("www"), "A", ELSEWHERE) == {"192.0.2.200"}
