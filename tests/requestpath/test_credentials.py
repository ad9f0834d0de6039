"""Secrets come from files and the environment; on the command line they still work, with a
warning that they show in the process list."""

from __future__ import annotations

from pathlib import Path

import pytest

from trafficmgr.requestpath.credentials import (
    TOKENS_ENV,
    UPSTREAM_KEY_ENV,
    client_tokens,
    upstream_key,
)


def test_tokens_from_files_and_the_environment_without_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# clients\nsk-one\n\n  sk-two  \n")
    tokens, warnings = client_tokens([], [str(path)], {TOKENS_ENV: "sk-three, sk-four\nsk-one"})
    assert tokens == ["sk-one", "sk-two", "sk-three", "sk-four"]
    assert warnings == []


def test_tokens_on_the_command_line_work_with_a_warning() -> None:
    tokens, warnings = client_tokens(["sk-argv"], [], {})
    assert tokens == ["sk-argv"]
    assert len(warnings) == 1 and "process list" in warnings[0] and "--token-file" in warnings[0]


def test_an_unreadable_token_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--token-file"):
        client_tokens([], [str(tmp_path / "absent")], {})


def test_upstream_key_from_file_then_environment(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("sk-upstream\n")
    assert upstream_key(None, str(path), {UPSTREAM_KEY_ENV: "sk-env"}) == ("sk-upstream", [])
    assert upstream_key(None, None, {UPSTREAM_KEY_ENV: " sk-env\n"}) == ("sk-env", [])
    assert upstream_key(None, None, {}) == (None, [])
    key, warnings = upstream_key("sk-argv", None, {UPSTREAM_KEY_ENV: "sk-env"})
    assert key == "sk-argv" and "process list" in warnings[0]


def test_upstream_key_flags_exclude_each_other_and_an_empty_file_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "key"
    path.write_text("\n# nothing\n")
    with pytest.raises(ValueError, match="give one"):
        upstream_key("sk-argv", str(path), {})
    with pytest.raises(ValueError, match="holds no key"):
        upstream_key(None, str(path), {})
