"""Where each endpoint listens, and the command line that starts and stops the server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.simserver.lab import request
from trafficmgr.fleetfile import load_fleet_file, load_fleet_text
from trafficmgr.simserver import fleet_specs, single_spec
from trafficmgr.simserver.cli import run_cli
from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def local_fleet(port: int) -> str:
    return f"""\
zone: local.example.test
regions:
  - name: here
    country: IE
    location: {{lat: 53.35, lon: -6.26}}
    addresses: [192.0.2.10]
    endpoints:
      - {{name: remote-1, address: "10.9.0.1:8000", gpu: A100, gpus: 2, models: [m]}}
      - {{name: local-1, address: "127.0.0.1:{port}", gpu: L4, gpus: 1, models: [m, n]}}
      - {{name: bare-ip, address: "127.0.0.5", gpu: L4, gpus: 1, models: [m]}}
"""


def test_demo_fleet_is_numbered_in_fleet_order() -> None:
    fleet = load_fleet_file(str(ROOT / "examples" / "fleet.yaml"))
    specs = fleet_specs(fleet)
    assert [s.endpoint.name for s in specs] == [e.name for e in fleet.endpoints()]
    assert [(s.host, s.port) for s in specs] == [("127.0.0.1", 8100 + i) for i in range(14)]
    assert specs[0].profile.name == "H100" and specs[0].endpoint.gpus == 8


def test_loopback_addresses_are_served_exactly_there() -> None:
    specs = fleet_specs(load_fleet_text(local_fleet(9555)), base_port=7000)
    assert [(s.endpoint.name, s.host, s.port) for s in specs] == [
        ("remote-1", "127.0.0.1", 7000),
        ("local-1", "127.0.0.1", 9555),
        ("bare-ip", "127.0.0.1", 7002),  # no port: mapped like any other
    ]
    only = fleet_specs(load_fleet_text(local_fleet(9555)), base_port=0, only=["remote-1"])
    assert [(s.endpoint.name, s.port) for s in only] == [("remote-1", 0)]
    with pytest.raises(ValueError, match="nope"):
        fleet_specs(load_fleet_text(local_fleet(9555)), only=["nope"])


def test_single_endpoint_spec() -> None:
    spec = single_spec("127.0.0.1:0", gpu="A100", gpus=4, models=["a", " b "])
    assert (spec.host, spec.port, spec.endpoint.models) == ("127.0.0.1", 0, ("a", "b"))
    assert spec.profile.prefill_tokens_per_s == 6000
    for bad in (
        {"gpu": "Z80", "gpus": 1, "models": ["a"]},
        {"gpu": "L4", "gpus": 0, "models": ["a"]},
        {"gpu": "L4", "gpus": 1, "models": [""]},
    ):
        with pytest.raises(ValueError):
            single_spec("127.0.0.1:0", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        single_spec("127.0.0.1", gpu="L4", gpus=1, models=["a"])


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--listen", "127.0.0.1:0", "--gpu", "Z80", "--models", "a"],
        ["--listen", "127.0.0.1:0", "--models", "a", "--fault", "nobody=5xx"],
        ["--listen", "127.0.0.1:0", "--models", "a", "--fault", "sim-0=melt"],
        ["--listen", "127.0.0.1:0", "--models", "a", "--time-scale", "0"],
        ["--fleet", "/nonexistent/fleet.yaml"],
    ],
)
def test_bad_command_lines_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(argv) == 2
    assert capsys.readouterr().err.startswith("trafficmgr-simserver: ")


def test_console_script_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["trafficmgr-simserver"] == "trafficmgr.simserver.cli:main"


def test_module_serves_a_fleet_prints_the_mapping_and_stops(tmp_path: Path) -> None:
    port = free_port()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(local_fleet(port))
    addresses = tmp_path / "addresses.json"
    argv = ["--fleet", str(fleet), "--base-port", "0", "--write-addresses", str(addresses),
            "--time-scale", "100", "--fault", "remote-1=down"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "trafficmgr.simserver", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                break
        table = json.loads(addresses.read_text())
        assert table["local-1"] == f"127.0.0.1:{port}"
        assert any(line.startswith("local-1") and f":{port}" in line for line in lines)
        assert any("(fleet address 10.9.0.1:8000)" in line for line in lines)
        assert request(f"http://127.0.0.1:{port}", "GET", "/health")[0] == 200
        remote = "http://" + table["remote-1"]
        assert request(remote, "GET", "/health")[0] == 503  # --fault remote-1=down
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(15)
        assert proc.stdout is not None
        proc.stdout.close()
    assert status == 0
