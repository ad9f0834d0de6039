"""The command line: exact output keys, plot, progress and clear errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worlds import SIM as SIM_WORLD_YAML
from trafficmgr.sim.cli import run_cli

POLICY_KEYS = {
    "requests",
    "completed",
    "rejected",
    "latency_ms",
    "ttft_ms",
    "throughput_tokens_per_s",
    "goodput",
    "util_cov",
    "util_mean",
    "region_share",
    "residency_violations",
}
# added to the contract's keys: the utilisation spread over serving endpoints and in-region
EXTRA_KEYS = {"util_cov_serving", "util_cov_region", "util_by_region"}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(SIM_WORLD_YAML)
    trace = tmp_path / "trace.csv"
    rows = "".join(f"{k * 0.05:.3f},{500 + 37 * k % 900},{5 + k % 40}\n" for k in range(400))
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    return fleet, trace


@pytest.mark.slow
def test_json_has_exactly_the_contract_keys(files: tuple[Path, Path], tmp_path: Path) -> None:
    fleet, trace = files
    out_json, out_png = tmp_path / "out.json", tmp_path / "out.png"
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run_cli(
        [
            "--fleet",
            str(fleet),
            "--trace",
            str(trace),
            "--policies",
            "round_robin,least_connections,least_outstanding_work,ai_aware,oracle",
            "--load",
            "0.8",
            "--seed",
            "3",
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ],
        stdout,
        stderr,
    )
    assert code == 0, stderr.getvalue()
    doc = json.loads(out_json.read_text())
    assert set(doc) == {"load", "trace", "policies"}
    assert doc["load"] == 0.8
    assert doc["trace"]["format"] == "azure" and doc["trace"]["requests"] == 400
    assert list(doc["policies"]) == [
        "round_robin",
        "least_connections",
        "least_outstanding_work",
        "ai_aware",
        "oracle",
    ]
    for entry in doc["policies"].values():
        assert set(entry) == POLICY_KEYS | EXTRA_KEYS
        assert set(entry["util_by_region"]) == {"eu-west", "eu-central", "us-east"}
        assert set(entry["latency_ms"]) == {"p50", "p95", "p99"}
        assert set(entry["ttft_ms"]) == {"p50", "p99"}
        assert set(entry["region_share"]) == {"eu-west", "eu-central", "us-east"}
        assert entry["completed"] + entry["rejected"] == entry["requests"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ai_aware" in stdout.getvalue()
    assert stderr.getvalue() == ""  # not a terminal: no progress bar


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--policies", "ai_aware,fastest"], "unknown policies fastest"),
        (["--load", "-1"], "--load"),
        (["--fault", "eu-west@9-3"], "START < END"),
        (["--fault", "mars@1-2"], "no region or endpoint"),
    ],
)
def test_bad_options_exit_2_with_the_reason(
    files: tuple[Path, Path], tmp_path: Path, extra: list[str], words: str
) -> None:
    fleet, trace = files
    stderr = io.StringIO()
    code = run_cli(
        ["--fleet", str(fleet), "--trace", str(trace), "--json", str(tmp_path / "o.json"), *extra],
        io.StringIO(),
        stderr,
    )
    assert code == 2
    assert words in stderr.getvalue()


def test_bad_trace_and_fleet_name_the_place(files: tuple[Path, Path], tmp_path: Path) -> None:
    fleet, trace = files
    bad_trace = tmp_path / "bad.csv"
    bad_trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,x,3\n")
    stderr = io.StringIO()
    assert (
        run_cli(
            ["--fleet", str(fleet), "--trace", str(bad_trace), "--json", "-"], io.StringIO(), stderr
        )
        == 2
    )
    assert "bad.csv:3: column 'ContextTokens'" in stderr.getvalue()
    bad_fleet = tmp_path / "fleet.yaml"
    bad_fleet.write_text(SIM_WORLD_YAML.replace("gpu: L4", "gpu: L40"))
    stderr = io.StringIO()
    assert (
        run_cli(
            ["--fleet", str(bad_fleet), "--trace", str(trace), "--json", "-"], io.StringIO(), stderr
        )
        == 2
    )
    assert "regions[0].endpoints[1].gpu" in stderr.getvalue()


@pytest.mark.slow
def test_module_entry_point_writes_json_to_stdout(files: tuple[Path, Path]) -> None:
    fleet, trace = files
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trafficmgr.sim",
            "--fleet",
            str(fleet),
            "--trace",
            str(trace),
            "--policies",
            "ai_aware",
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policies"]["ai_aware"]["requests"] == 400


@pytest.mark.slow
def test_progress_bar_on_a_terminal(files: tuple[Path, Path], tmp_path: Path) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    fleet, trace = files
    stderr = Tty()
    assert (
        run_cli(
            [
                "--fleet",
                str(fleet),
                "--trace",
                str(trace),
                "--policies",
                "ai_aware",
                "--json",
                str(tmp_path / "o.json"),
            ],
            io.StringIO(),
            stderr,
        )
        == 0
    )
    assert "ai_aware" in stderr.getvalue() and "100%" in stderr.getvalue()
