"""``manage.py simulate``: the simulator's flags, output document and errors as a command."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from regions.management.commands.simulate import Command
from tests.worlds import SIM as SIM_WORLD_YAML
from trafficmgr.sim.cli import build_parser

AZURE = Path(__file__).resolve().parents[2] / "examples" / "traces"
AZURE = AZURE / "AzureLLMInferenceTrace_code.csv"
SLICE = 300  # requests
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
def fleet_file(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(SIM_WORLD_YAML)
    return path


@pytest.fixture
def trace_slice(tmp_path: Path) -> Path:
    """The first requests of the shared Azure trace (a synthetic one like it without it)."""
    path = tmp_path / "azure-slice.csv"
    if AZURE.exists():
        with AZURE.open(encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(SLICE + 1)]
    else:
        lines = ["TIMESTAMP,ContextTokens,GeneratedTokens\n"] + [
            f"2023-11-16 18:17:{k // 20:02d}.{k % 20 * 5:02d}00000,{800 + 53 * k % 3000},"
            f"{2 + k % 30}\n"
            for k in range(SLICE)
        ]
    path.write_text("".join(lines))
    return path


def simulate(*args: str) -> tuple[str, str]:
    """Run the command; return its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command("simulate", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_writes_the_contract_document_and_the_plot(
    fleet_file: Path, trace_slice: Path, tmp_path: Path
) -> None:
    out_json, out_png = tmp_path / "out.json", tmp_path / "out.png"
    stdout, _ = simulate(
        "--fleet",
        str(fleet_file),
        "--trace",
        str(trace_slice),
        "--policies",
        "round_robin,ai_aware",
        "--load",
        "0.8",
        "--seed",
        "5",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    )
    doc = json.loads(out_json.read_text())
    assert set(doc) == {"load", "trace", "policies"} and doc["load"] == 0.8
    assert doc["trace"]["format"] == "azure" and doc["trace"]["requests"] == SLICE
    assert doc["trace"]["seed"] == 5
    assert list(doc["policies"]) == ["round_robin", "ai_aware"]
    for entry in doc["policies"].values():
        assert set(entry) == POLICY_KEYS | EXTRA_KEYS
        assert set(entry["util_by_region"]) == {"eu-west", "eu-central", "us-east"}
        assert set(entry["latency_ms"]) == {"p50", "p95", "p99"}
        assert set(entry["ttft_ms"]) == {"p50", "p99"}
        assert set(entry["region_share"]) == {"eu-west", "eu-central", "us-east"}
        assert entry["requests"] == SLICE == entry["completed"] + entry["rejected"]
        assert entry["residency_violations"] == 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "round_robin" in stdout and "ai_aware" in stdout  # the summary table


def test_json_to_stdout_is_the_document_alone(fleet_file: Path, trace_slice: Path) -> None:
    stdout, _ = simulate(
        "--fleet",
        str(fleet_file),
        "--trace",
        str(trace_slice),
        "--policies",
        "oracle",
        "--json",
        "-",
    )
    assert set(json.loads(stdout)["policies"]) == {"oracle"}


def test_bad_input_is_a_command_error_with_the_reason(
    fleet_file: Path, trace_slice: Path, tmp_path: Path
) -> None:
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(
            "simulate",
            "--fleet",
            str(fleet_file),
            "--trace",
            str(trace_slice),
            "--policies",
            "ai_aware,telepathy",
            "--json",
            str(tmp_path / "never.json"),
            stdout=io.StringIO(),
            stderr=err,
        )
    assert raised.value.returncode == 2
    assert "unknown policies telepathy" in err.getvalue()
    assert not (tmp_path / "never.json").exists()


def test_has_every_flag_of_the_module_command_line() -> None:
    module_flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    parser = Command().create_parser("manage.py", "simulate")
    command_flags = {flag for action in parser._actions for flag in action.option_strings}
    assert module_flags <= command_flags
