"""A running server follows fleet changes: moved addresses, new models, bad sources ignored."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import dns.query
import dns.rcode
import pytest

from tests.dns.world import CITY_DB, FLEET_FILE, GB, NAME, ROOT, ZONE, addresses, need_geoip, query
from trafficmgr.dns.fleetwatch import FleetFile, apply_fleet, follow_fleet
from trafficmgr.dns.server import DnsServer
from trafficmgr.fleetfile import FleetError
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.ports import TCP_AND_UDP, free_port


def moved(fleet: Fleet, region: str, address: str) -> Fleet:
    regions = tuple(
        replace(r, addresses=(address,)) if r.name == region else r for r in fleet.regions
    )
    return replace(fleet, regions=regions)


def with_model(fleet: Fleet, model: str) -> Fleet:
    first = fleet.regions[0]
    endpoint = replace(first.endpoints[0], name=f"{first.endpoints[0].name}-new", models=(model,))
    regions = (replace(first, endpoints=(*first.endpoints, endpoint)), *fleet.regions[1:])
    return replace(fleet, regions=regions)


def ask(server: DnsServer, message: object) -> dns.message.Message:
    wire = server.handle(message.to_wire(), "127.0.0.1")  # type: ignore[attr-defined]
    assert wire is not None
    return dns.message.from_wire(wire)


def test_apply_swaps_only_a_new_usable_fleet(server: DnsServer, fleet: Fleet) -> None:
    assert not apply_fleet(server, None)
    assert not apply_fleet(server, fleet)
    with pytest.raises(ValueError, match="no regions"):
        apply_fleet(server, replace(fleet, regions=()))
    assert server.fleet is fleet
    both = moved(moved(fleet, "eu-west", "192.0.2.99"), "eu-central", "192.0.2.98")
    assert apply_fleet(server, both)  # GB is answered by one of the two EU regions
    assert addresses(ask(server, query(NAME, "A", ecs=(GB, 32)))) <= {"192.0.2.99", "192.0.2.98"}


def test_follower_serves_changes_and_keeps_the_fleet_when_the_source_fails(
    server: DnsServer, fleet: Fleet
) -> None:
    eu_moved = moved(fleet, "eu-west", "192.0.2.99")
    answers = [
        eu_moved,
        RuntimeError("database unreachable"),
        replace(fleet, regions=()),  # an emptied database: not served
        None,  # unchanged
        with_model(eu_moved, "qwen-3-235b"),
    ]
    seen: list[Fleet] = []

    def source() -> Fleet | None:
        answer = answers.pop(0) if answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def run() -> None:
        task = asyncio.create_task(follow_fleet(server, source, every_s=0.01))
        for _ in range(500):
            await asyncio.sleep(0.01)
            if not seen or seen[-1] is not server.fleet:
                seen.append(server.fleet)
            if not answers:
                break
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert not answers
    assert server.metrics["fleet_errors"] == 2 and server.metrics["fleet_updates"] == 2
    assert "qwen-3-235b" in server.fleet.models()
    reply = ask(server, query(f"qwen-3-235b.{ZONE}", "A", ecs=(GB, 32)))
    assert reply.rcode() == dns.rcode.NOERROR
    assert addresses(ask(server, query(NAME, "A", ecs=(GB, 32)))) <= {"192.0.2.99", "192.0.2.20"}


def test_fleet_file_is_read_again_only_when_it_changes(
    tmp_path: Path, denying_fleet: Fleet
) -> None:
    fleet = denying_fleet  # the file as shipped
    path = tmp_path / "fleet.yaml"
    shutil.copy(FLEET_FILE, path)
    source = FleetFile(str(path))
    assert source() == fleet
    assert source() is None
    path.write_text(path.read_text().replace("192.0.2.10", "192.0.2.99"))
    changed = source()
    assert changed is not None and changed.regions[0].addresses[0] == "192.0.2.99"
    path.write_text("regions: [")  # half-written: an error, and the next good read still counts
    with pytest.raises(FleetError):
        source()
    path.write_text(FLEET_FILE.read_text())
    assert source() == fleet


def test_server_process_follows_its_fleet_file(tmp_path: Path) -> None:
    need_geoip()
    path = tmp_path / "fleet.yaml"
    shutil.copy(FLEET_FILE, path)
    port = free_port(TCP_AND_UDP)
    process = subprocess.Popen(
        [
            sys.executable, "-m", "trafficmgr.dns", "--fleet", str(path),
            "--listen", f"127.0.0.1:{port}", "--geoip-db", str(CITY_DB), "--state-file", "",
            "--rrl-rate", "0", "--fleet-poll", "0.2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stdout.readline()
        message = query(NAME, "A", ecs=(GB, 32))
        assert "192.0.2.99" not in addresses(dns.query.udp(message, "127.0.0.1", port=port))
        text = path.read_text().replace("192.0.2.10", "192.0.2.99")  # both EU regions: GB
        path.write_text(text.replace("192.0.2.20", "192.0.2.99"))  # is answered by one of them
        deadline = time.monotonic() + 10
        while True:
            got = addresses(dns.query.udp(message, "127.0.0.1", port=port, timeout=2))
            if "192.0.2.99" in got:
                break
            assert time.monotonic() < deadline, f"still {got} 10 s after the fleet file changed"
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
