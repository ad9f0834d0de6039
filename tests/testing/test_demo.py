"""The shared demo launcher's command line is one ``manage.py demo`` accepts."""

from __future__ import annotations

from pathlib import Path

from regions.management.commands.demo import Command
from trafficmgr.testing.demo import DemoPorts, demo_argv


def parsed(argv: list[str]) -> dict[str, object]:
    assert argv[1:3] == ["manage.py", "demo"]
    return vars(Command().create_parser("manage.py", "demo").parse_args(argv[3:]))


def test_the_launcher_s_flags_are_the_demo_command_s() -> None:
    ports = DemoPorts(18001, 15354, 18081)
    options = parsed(demo_argv(ports, agents=False, fleet=Path("examples/fleet.yaml")))
    given = {str(value) for value in options.values()}
    assert {"127.0.0.1:18001", "127.0.0.1:15354", "127.0.0.1:18081"} <= given
    assert "examples/fleet.yaml" in given


def test_free_demo_ports_differ() -> None:
    ports = DemoPorts.free()
    assert len({ports.web, ports.dns, ports.gateway}) == 3
