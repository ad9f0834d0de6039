"""A test that skips for a missing binary names the package to install, never a guess: every
binary the tests ``need`` has its Debian package in ``servers.PACKAGES``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.dns_publish import servers

TESTS = Path(__file__).resolve().parents[1]


def needed_binaries() -> set[str]:
    calls = re.compile(r"\bneed\(\s*\"([^\"]+)\"")
    return {name for path in TESTS.rglob("*.py") for name in calls.findall(path.read_text())}


def test_every_needed_binary_has_its_package() -> None:
    needed = needed_binaries()
    assert {"named-checkconf", "knotc", "named"} <= needed
    assert needed <= set(servers.PACKAGES), needed - set(servers.PACKAGES)
    assert servers.PACKAGES["named-checkconf"] == "bind9-utils"
    assert servers.PACKAGES["knotc"] == "knot"


def test_the_skip_message_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install bind9-utils\)"):
        servers.need("named-checkconf")
