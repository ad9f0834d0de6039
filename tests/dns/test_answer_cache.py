"""The cache of rendered answers: per-query ID, case and ECS; emptied when the table changes."""

from __future__ import annotations

from collections.abc import Callable

from tests.dns.world import GB, NAME, addresses, ask, ecs_of, everywhere, query
from trafficmgr.dns.server import DnsServer


def test_repeated_queries_hit_the_cache_with_their_own_id_and_case(server: DnsServer) -> None:
    first = query(NAME, "A", ecs=(GB, 32))
    second = query(NAME.upper(), "A", ecs=(GB, 32))
    a, b = ask(server, first), ask(server, second)
    assert a.id == first.id and b.id == second.id and a.id != b.id
    assert b.question[0].name.to_text() == NAME.upper() + "."
    assert addresses(a) == addresses(b)
    assert server.metrics["cache_hits"] == 1 and server.metrics["cache_misses"] == 1


def test_cached_answers_echo_each_client_ecs(server: DnsServer) -> None:
    a = ecs_of(ask(server, query(NAME, "A", ecs=("81.2.69.142", 32))))
    b = ecs_of(ask(server, query(NAME, "A", ecs=("81.2.69.0", 24))))
    assert server.metrics["cache_hits"] == 1  # same /24: same entry
    assert a is not None and b is not None
    assert (a.address, a.srclen, a.scopelen) == ("81.2.69.142", 32, 24)
    assert (b.address, b.srclen, b.scopelen) == ("81.2.69.0", 24, 24)


def test_a_new_table_that_moves_the_answer_renders_it_again(
    make_server: Callable[..., DnsServer],
) -> None:
    server = make_server(table=everywhere([("eu-west", 1.0)], version="v1"))
    assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.10"}
    assert server.set_table(everywhere([("eu-central", 1.0)], version="v2"))
    assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.20"}
    assert server.metrics["cache_hits"] == 0


def test_the_cache_stays_bounded(make_server: Callable[..., DnsServer]) -> None:
    from tests.dns.world import quiet_config

    server = make_server(quiet_config(cache_size=50))
    for i in range(500):
        ask(server, query(f"n{i}.infer.example.test", "A"))  # NXDOMAIN, one entry each
    assert server.metrics["cache_entries"] <= 50
