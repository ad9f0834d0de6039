"""``python -m trafficmgr.epp`` takes its client tokens from a file or the environment, as the
gateway does, so they need not be in its command line; ``--token`` still works and warns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trafficmgr.epp import cli
from trafficmgr.testing.ports import free_port


def _started(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Any:
    """Run the EPP's command line up to serving; return the core it would serve."""
    seen: dict[str, Any] = {}

    async def run(core: Any, *_: Any) -> None:
        seen["core"] = core

    monkeypatch.setattr(cli, "_run", run)
    assert cli.main(argv) == 0
    return seen["core"]


def _accepts(core: Any, token: str) -> bool:
    return core.source.authenticate(token) is not None


def test_tokens_from_a_file_and_the_environment(
    world_yaml: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "fleet.yaml").write_text(world_yaml)
    (tmp_path / "tokens").write_text("sk-from-file\n")
    monkeypatch.setenv("TRAFFICMGR_CLIENT_TOKENS", "sk-from-env")
    argv = ["--fleet", str(tmp_path / "fleet.yaml"), "--listen", f"127.0.0.1:{free_port()}"]
    core = _started(monkeypatch, [*argv, "--token-file", str(tmp_path / "tokens")])
    assert _accepts(core, "sk-from-file") and _accepts(core, "sk-from-env")
    assert not _accepts(core, "sk-other")
    assert "process list" not in caplog.text


def test_a_token_on_the_command_line_still_works_with_a_warning(
    world_yaml: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "fleet.yaml").write_text(world_yaml)
    monkeypatch.delenv("TRAFFICMGR_CLIENT_TOKENS", raising=False)
    argv = ["--fleet", str(tmp_path / "fleet.yaml"), "--listen", f"127.0.0.1:{free_port()}"]
    core = _started(monkeypatch, [*argv, "--token", "sk-argv"])
    assert _accepts(core, "sk-argv")
    assert "process list" in caplog.text


def test_an_unreadable_token_file_is_named(
    world_yaml: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "fleet.yaml").write_text(world_yaml)
    argv = ["--fleet", str(tmp_path / "fleet.yaml"), "--listen", f"127.0.0.1:{free_port()}"]
    with pytest.raises(SystemExit):
        _started(monkeypatch, [*argv, "--token-file", str(tmp_path / "missing")])
    assert "--token-file" in capsys.readouterr().err
