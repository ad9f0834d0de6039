"""Configuration: flags over TRAFFICMGR_AGENT_* variables over defaults, checked up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.config import ConfigError, parse_config

BASE = ["--control-plane", "https://tm.example.test", "--token", "t", "--endpoint", "euw-1"]


def test_flags_and_defaults() -> None:
    cfg = parse_config(BASE, {})
    assert (cfg.control_plane, cfg.token, cfg.endpoint) == ("https://tm.example.test", "t", "euw-1")
    assert cfg.interval_s == 1.0 and cfg.server_kind == "auto" and not cfg.simulate
    assert (cfg.sim_gpu, cfg.sim_gpus, cfg.sim_load) == ("H100", 8, 0.6)


def test_environment_fills_in_and_flags_win() -> None:
    env = {
        "TRAFFICMGR_AGENT_CONTROL_PLANE": "http://cp:8000",
        "TRAFFICMGR_AGENT_TOKEN": "from-env",
        "TRAFFICMGR_AGENT_ENDPOINT": "use-1",
        "TRAFFICMGR_AGENT_INTERVAL": "0.5",
        "TRAFFICMGR_AGENT_METRICS_URL": "http://127.0.0.1:8000/metrics",
        "TRAFFICMGR_AGENT_MODELS": "llama-3-70b, llama-3-8b",
        "TRAFFICMGR_AGENT_SIMULATE": "true",
        "TRAFFICMGR_AGENT_SIM_GPUS": "4",
    }
    cfg = parse_config([], env)
    assert (cfg.control_plane, cfg.token, cfg.endpoint) == ("http://cp:8000", "from-env", "use-1")
    assert cfg.interval_s == 0.5 and cfg.simulate and cfg.sim_gpus == 4
    assert cfg.models == ("llama-3-70b", "llama-3-8b")
    assert parse_config(["--interval", "2", "--endpoint", "x"], env).interval_s == 2.0


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("file-token\n")
    args = ["--control-plane", "http://cp", "--endpoint", "e", "--token-file", str(path)]
    assert parse_config(args, {}).token == "file-token"


def test_seed_defaults_per_endpoint() -> None:
    a = parse_config(BASE, {})
    b = parse_config([*BASE[:-1], "euw-2"], {})
    assert a.sim_seed != b.sim_seed
    assert parse_config([*BASE, "--sim-seed", "5"], {}).sim_seed == 5


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--token", "t", "--endpoint", "e"], {}, "--control-plane"),
        (["--control-plane", "http://cp", "--endpoint", "e"], {}, "--token"),
        (["--control-plane", "http://cp", "--token", "t"], {}, "--endpoint"),
        ([BASE[0], "ftp://cp", *BASE[2:]], {}, "http(s) URL"),
        ([*BASE, "--interval", "0"], {}, "interval"),
        ([*BASE, "--interval", "7200"], {}, "between 0.05 and 3600"),
        (BASE, {"TRAFFICMGR_AGENT_INTERVAL": "fast"}, "TRAFFICMGR_AGENT_INTERVAL='fast'"),
        (BASE, {"TRAFFICMGR_AGENT_SERVER_KIND": "sglang"}, "server kind"),
        ([*BASE, "--token-file", "/nonexistent/t", "--token", ""], {}, "token file"),
        ([*BASE[:-1], "e" * 64], {}, "at most 63 characters"),
    ],
)
def test_mistakes_are_named(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(argv, env)


def test_once_needs_no_control_plane() -> None:
    cfg = parse_config(["--once", "--endpoint", "e", "--simulate"], {})
    assert cfg.once and cfg.control_plane == ""
