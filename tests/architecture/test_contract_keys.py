"""No ``trafficmgr:`` key literal outside ``trafficmgr/contracts.py``."""

from __future__ import annotations

from pathlib import Path

from tests.architecture.contract_keys import spelled_keys, violations


def test_no_key_is_spelled_outside_the_contract() -> None:
    assert violations() == []


def test_the_scan_finds_plain_and_formatted_keys(tmp_path: Path) -> None:
    source = tmp_path / "spelled.py"
    source.write_text(
        'A = "trafficmgr:table"\n'
        'def f(i):\n    return f"trafficmgr:drill-alive:{i}"\n'
        'MESSAGE = "trafficmgr: SECRET_KEY is not set"\n'
        'IMAGE = "trafficmgr:latest"\n'
    )
    assert [line for line, _ in spelled_keys(source)] == [1, 3]
