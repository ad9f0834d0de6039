"""Fail static: static answers before any table, the last good table kept, persisted, reloaded."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import dns.rcode

from tests.dns.world import (
    AP_V4,
    CN,
    EU_V4,
    GB,
    JP,
    NAME,
    SE,
    US,
    US_V4,
    ZONE,
    addresses,
    ask,
    everywhere,
    make_table,
    query,
    quiet_config,
    txt,
)
from trafficmgr.dns.server import DnsServer
from trafficmgr.dns.sources import RedisSource, watch_file
from trafficmgr.dns.tables import write_atomic
from trafficmgr.routing.table import compile_table, table_to_json
from trafficmgr.routing.types import Fleet, RegionState, RegionStatus


def test_before_any_table_the_static_fleet_answers_with_residency(server: DnsServer) -> None:
    assert server.store.snapshot.source == "static"
    for client, allowed in ((GB, EU_V4), (SE, EU_V4), (US, US_V4), (CN, AP_V4), (JP, AP_V4)):
        for name in (NAME, f"llama-3-8b.{ZONE}", f"api.{ZONE}"):
            got = addresses(ask(server, query(name, "A", ecs=(client, 32))))
            assert got and got <= allowed, (client, name, got)
    assert addresses(ask(server, query(NAME, "A"), source="127.0.0.1"))  # default zone too


def test_swapped_table_is_served_persisted_and_reloaded(
    make_server: Callable[..., DnsServer], tmp_path: Path
) -> None:
    state = tmp_path / "var" / "dns-table.json"
    first = make_server(quiet_config(state_file=str(state)))
    assert first.set_table(everywhere([("eu-central", 1.0)], version="good-1"))
    first.store.flush()
    assert json.loads(state.read_text())["version"] == "good-1"
    assert [p.name for p in state.parent.iterdir()] == ["dns-table.json"]  # no temp left

    restarted = make_server(quiet_config(state_file=str(state)))  # the control plane is gone
    assert restarted.store.snapshot.source == "state-file"
    assert addresses(ask(restarted, query(NAME, "A"))) == {"192.0.2.20"}
    assert "table=good-1" in txt(ask(restarted, query(NAME, "TXT")))


def test_corrupt_state_file_falls_back_to_static(
    make_server: Callable[..., DnsServer], tmp_path: Path
) -> None:
    state = tmp_path / "dns-table.json"
    state.write_text('{"version": "half-writ')
    server = make_server(quiet_config(state_file=str(state)))
    assert server.store.snapshot.source == "static"
    assert server.metrics["table_rejected"] == 1
    assert addresses(ask(server, query(NAME, "A", ecs=(GB, 32)))) <= EU_V4


def test_a_table_without_zones_is_refused_and_the_last_good_kept(
    make_server: Callable[..., DnsServer],
) -> None:
    server = make_server(table=everywhere([("eu-central", 1.0)], version="good"))
    assert not server.set_table(make_table("empty", {}))
    assert server.store.snapshot.version == "good"
    assert server.metrics["table_rejected"] == 1


def test_a_table_of_unknown_regions_is_answered_from_the_static_fleet(
    make_server: Callable[..., DnsServer],
) -> None:
    server = make_server(table=everywhere([("mars-north", 1.0)], version="newer-fleet"))
    assert addresses(ask(server, query(NAME, "A", ecs=(GB, 32)))) <= EU_V4
    assert "answered from static" in txt(ask(server, query(NAME, "TXT", ecs=(GB, 32))))


def test_fail_closed_list_is_nodata_and_txt_says_why(
    make_server: Callable[..., DnsServer],
) -> None:
    note = "fail_closed: all allowed regions down (eu-west down, eu-central down)"
    table = make_table(
        "closed",
        {"EU": {"llama-3-70b": []}, "default": {"llama-3-70b": [("us-east", 1.0)]}},
        notes={"EU": {"llama-3-70b": note}},
    )
    server = make_server(table=table)
    reply = ask(server, query(NAME, "A", ecs=(GB, 32)))
    assert reply.rcode() == dns.rcode.NOERROR and not reply.answer and reply.authority
    assert note in txt(ask(server, query(NAME, "TXT", ecs=(GB, 32))))


def test_failover_table_moves_gb_within_the_eu_only(
    make_server: Callable[..., DnsServer], fleet: Fleet
) -> None:
    states = {r.name: RegionState.HEALTHY for r in fleet.regions} | {"eu-west": RegionState.DOWN}
    statuses = {n: RegionStatus(s, 0.5, 1e9, s.value) for n, s in states.items()}
    server = make_server(table=compile_table(fleet, statuses, time.time()))
    assert addresses(ask(server, query(NAME, "A", ecs=(GB, 32)))) == {"192.0.2.20"}
    assert addresses(ask(server, query(NAME, "AAAA", ecs=(GB, 32)))) == {"2001:db8:20::1"}


def test_persist_failure_is_counted_and_serving_goes_on(
    make_server: Callable[..., DnsServer], tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    server = make_server(quiet_config(state_file=str(blocker / "table.json")))
    assert server.set_table(everywhere([("eu-central", 1.0)], version="v"))
    server.store.flush()
    assert server.metrics["table_persist_errors"] == 1
    assert addresses(ask(server, query(NAME, "A"))) == {"192.0.2.20"}


def test_write_atomic_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    write_atomic(str(target), b"old")
    write_atomic(str(target), b"new contents")
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_table_file_is_watched_and_a_bad_write_keeps_the_last_good(
    make_server: Callable[..., DnsServer], tmp_path: Path
) -> None:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table_to_json(everywhere([("eu-west", 1.0)], "file-1"))))
    server = make_server(quiet_config(table_file=str(path)))
    assert server.store.snapshot.version == "file-1"

    async def scenario() -> None:
        task = asyncio.create_task(watch_file(server.store, str(path), interval_s=0.02))
        try:
            doc = table_to_json(everywhere([("us-west", 1.0)], "file-2"))
            path.write_text(json.dumps(doc))
            await _until(lambda: server.store.snapshot.version == "file-2")
            path.write_text("{not json")
            await _until(lambda: server.metrics["table_rejected"] >= 1)
        finally:
            task.cancel()

    asyncio.run(scenario())
    assert server.store.snapshot.version == "file-2"
    assert addresses(ask(server, query(NAME, "A"))) == {"198.51.100.20"}


def test_unreachable_redis_does_not_stop_answers(server: DnsServer) -> None:
    source = RedisSource("redis://127.0.0.1:1/0", server.store, server.counters)

    async def scenario() -> None:
        task = asyncio.create_task(source.run())
        try:
            await _until(lambda: server.metrics["redis_errors"] >= 1)
            assert ask(server, query(NAME, "A")).answer
        finally:
            task.cancel()

    asyncio.run(scenario())
    assert server.store.snapshot.source == "static" and not source.connected


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
